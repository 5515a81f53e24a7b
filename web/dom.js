// Small DOM helpers shared by the page's modules.

/**
 * A new element: `attrs` sets `class`, `data-*`, `aria-*`, `role` and `for` as attributes and
 * anything else as a property (so `textContent`, `hidden` or `disabled` work); `children` are
 * appended, strings as text (never as markup).
 */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k.startsWith("data-") || k.startsWith("aria-") || k === "role" || k === "for") node.setAttribute(k, v);
    else node[k] = v;
  }
  node.append(...children);
  return node;
}

/** How an agent instance is named on the page: `shopping[2]` is "Shopping (2)". */
export function agentLabel(agent) {
  if (agent === "orchestrator") return "Orchestrator";
  const name = agent.split("[")[0];
  const label = name.charAt(0).toUpperCase() + name.slice(1);
  const index = agent.match(/\[(\d+)\]/)?.[1];
  return index && index !== "1" ? `${label} (${index})` : label;
}
