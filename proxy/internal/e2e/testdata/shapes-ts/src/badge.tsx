declare global {
  namespace JSX {
    interface IntrinsicElements {
      [name: string]: unknown;
    }
  }
}

/** A label in a span: JSX, so only valid as typescriptreact. */
export function Badge(props: { label: string }) {
  return <span className="badge">{props.label}</span>;
}
