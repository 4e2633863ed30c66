/** A closed plane figure. */
export interface Shape {
  /** The surface inside the figure. */
  area(): number;
}
