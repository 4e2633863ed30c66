import { Shape } from "./shape";

/** Four equal sides. */
export class Square implements Shape {
  constructor(public side: number) {}

  area(): number {
    return this.side * this.side;
  }
}
