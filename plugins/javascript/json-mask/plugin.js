// json-mask: a kmirror record transform in JavaScript.
//
// Replaces the values of `fields` (comma-separated dotted paths, e.g. `card.number,email`;
// an array on the way applies the rest of the path to each element) in JSON record values
// with `mask` (default `***`). A value that is not JSON, or has none of the fields, passes
// unchanged (counted as kept). The masked value is written back compactly (the Rust
// `json_mask.wasm` keeps the value's text instead); a value with an integer beyond 2^53
// (which JavaScript cannot write back exactly) fails the transform (`on_transform_error`).
//
// Build: `kmirror plugin build`  Check: `kmirror plugin check json-mask.wasm`

let paths = [];
let mask = "***";

function maskAt(node, path) {
  if (Array.isArray(node)) return node.map((item) => maskAt(item, path)).some((x) => x);
  if (node === null || typeof node !== "object" || !Object.prototype.hasOwnProperty.call(node, path[0])) return false;
  if (path.length === 1) {
    node[path[0]] = mask;
    return true;
  }
  return maskAt(node[path[0]], path.slice(1));
}

// Strict UTF-8 where the runtime has it: invalid bytes are not JSON.
function decoder() {
  try {
    return new TextDecoder("utf-8", { fatal: true });
  } catch (e) {
    return new TextDecoder();
  }
}
const utf8 = decoder();

function outcome(record) {
  if (record.value === undefined || record.value === null) return { tag: "keep" };
  let document;
  let unsafe = false;
  try {
    document = JSON.parse(utf8.decode(record.value), (key, value) => {
      if (typeof value === "number" && Number.isInteger(value) && !Number.isSafeInteger(value)) unsafe = true;
      return value;
    });
  } catch (e) {
    return { tag: "keep" };
  }
  // Written back, an integer beyond 2^53 would change: the record fails rather than be
  // mirrored with other numbers (or unmasked).
  if (unsafe) throw new Error("json-mask: a number beyond JavaScript's exact integers (2^53)");
  const masked = paths.map((p) => maskAt(document, p));
  if (!masked.some((x) => x)) return { tag: "keep" };
  const value = new TextEncoder().encode(JSON.stringify(document));
  return { tag: "rewrite", val: { key: record.key, value, headers: record.headers } };
}

export const recordTransform = {
  configure(config) {
    const next = [];
    let m = "***";
    for (const [key, val] of config) {
      if (key === "fields") {
        for (const field of val.split(",").map((f) => f.trim()).filter((f) => f)) {
          const path = field.split(".");
          if (path.some((part) => part === "")) throw `json-mask: \`fields\`: \`${field}\` has an empty part`;
          next.push(path);
        }
      } else if (key === "mask") m = val;
      else throw `json-mask: unknown key \`${key}\`; known keys: fields, mask`;
    }
    if (next.length === 0) throw "json-mask: `fields` is required (comma-separated dotted paths)";
    paths = next;
    mask = m;
  },
  transform(records) {
    return records.map(outcome);
  },
};
