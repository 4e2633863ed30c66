import { Shape } from "./shape";

/** Sums the areas of shapes. */
export function total(shapes: Shape[]): number {
  let sum = 0;
  for (const s of shapes) {
    sum += areaOf(s);
  }
  return sum;
}

function areaOf(s: Shape): number {
  return s.area();
}
