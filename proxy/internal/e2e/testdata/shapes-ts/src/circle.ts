import { Shape } from "./shape";

/** Round. */
export class Circle implements Shape {
  constructor(public r: number) {}

  area(): number {
    return Math.PI * this.r * this.r;
  }
}
