// Relay dashboard: live updates while batches run. Elements with data-poll="<url>" are replaced by
// the HTML fragment at that URL every 1.5 s; a fragment whose batches are all finished comes back
// without data-poll, so polling stops by itself. No inline script anywhere (the CSP forbids it).
const PERIOD_MS = 1500;

async function refresh(element) {
  const url = element.getAttribute("data-poll");
  const response = await fetch(url, { credentials: "same-origin", headers: { accept: "text/html" } });
  if (!response.ok) return;
  const holder = document.createElement("div");
  holder.innerHTML = await response.text();
  const next = holder.firstElementChild;
  if (next && next.id === element.id) element.replaceWith(next);
}

async function tick() {
  const pending = [...document.querySelectorAll("[data-poll]")];
  await Promise.all(pending.map((element) => refresh(element).catch(() => undefined)));
  if (document.querySelector("[data-poll]")) setTimeout(tick, PERIOD_MS);
}

if (document.querySelector("[data-poll]")) setTimeout(tick, PERIOD_MS);
