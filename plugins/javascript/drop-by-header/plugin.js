// drop-by-header: a kmirror record transform in JavaScript.
//
// Drops every record carrying the header `header` (with exactly the UTF-8 value `value`,
// if given); keeps every other record as it is. Without `header` every record is kept.
// Throwing a string from `configure` refuses the configuration.
//
// Build: `kmirror plugin build`  Check: `kmirror plugin check drop-by-header.wasm`

let header = null;
let value = null;

const sameBytes = (a, b) => a !== undefined && a !== null && a.length === b.length && a.every((x, i) => x === b[i]);

const carries = (record) =>
  record.headers.some((h) => h.key === header && (value === null || sameBytes(h.value, value)));

export const recordTransform = {
  configure(config) {
    let h = null;
    let v = null;
    for (const [key, val] of config) {
      if (key === "header") h = val;
      else if (key === "value") v = val;
      else throw `drop-by-header: unknown key \`${key}\`; known keys: header, value`;
    }
    if (h === "") throw "drop-by-header: `header` is empty";
    if (v !== null && h === null) throw "drop-by-header: `value` needs `header`";
    header = h;
    value = v === null ? null : new TextEncoder().encode(v);
  },
  transform(records) {
    return records.map((r) => (header !== null && carries(r) ? { tag: "drop" } : { tag: "keep" }));
  },
};
