import { total } from "./calc";
import { Circle } from "./circle";
import { Square } from "./square";

/** Formats the total area of a square and a circle. */
export function report(): string {
  const figures = [new Square(2), new Circle(1)];
  return total(figures).toFixed(2);
}
