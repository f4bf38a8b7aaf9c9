// Stored procedure `reserve` of the order workflow: takes "ITEM QTY" off
// the item's stock (10 to begin with) in the realm's key-value table, in
// the transaction that records the workflow's step — exactly once.
//   tabos procedure install reserve examples/workflow-wasm/reserve.js
function main(arg) {
  const [item, qty] = arg.split(" ");
  const key = "stock/" + item;
  const have = Number(tabos.get(key) || "10");
  const want = Number(qty);
  if (!(want > 0) || want > have) {
    throw new Error("cannot reserve " + qty + " of " + item + ": " + have + " in stock");
  }
  tabos.put(key, String(have - want));
  return String(have - want);
}
