// A stored procedure in JavaScript: counts its calls in the realm's
// key-value table, in the call's own transaction (two calls never lose an
// increment), and returns the new count.
//   tabos procedure install counter examples/counter.js
//   tabos procedure call counter visits        # 1, then 2, ...
function main(name) {
  const key = "count/" + name;
  const n = Number(tabos.get(key) || "0") + 1;
  tabos.put(key, String(n));
  return String(n);
}
