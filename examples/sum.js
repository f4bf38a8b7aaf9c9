// examples/sum.js: the sum of its arguments (a JSON array) — a task of
// examples/graph.json: tabos procedure install sum examples/sum.js
function main(args) {
  return String(JSON.parse(args).reduce((a, b) => a + b, 0));
}
