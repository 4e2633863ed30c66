/** Not a number. */
export const seven: number = "seven";
