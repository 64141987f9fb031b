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

// Times: the server writes "5 min ago" with the UTC instant in the title; the title becomes the
// viewer's own local time (the browser knows its time zone, the server does not).
function localTimes(root) {
  for (const element of root.querySelectorAll("time[datetime]")) {
    const instant = new Date(element.getAttribute("datetime"));
    if (!Number.isNaN(instant.getTime())) element.title = instant.toLocaleString();
  }
}
localTimes(document);
new MutationObserver(() => localTimes(document)).observe(document.body, { childList: true, subtree: true });
