// regex-filter: a kmirror topic filter in JavaScript.
//
// Mirrors the topics matching `topics` (default `.*`) except those matching
// `topics.exclude` (default: MM2's `.*[\-\.]internal, .*\.replica, __.*`). Comma-separated
// regexes, each matching the whole name; excludes win. Throwing a string from `configure`
// refuses the configuration.
//
// Build: `kmirror plugin build`  Check: `kmirror plugin check regex-filter.wasm`

const DEFAULTS = { topics: ".*", "topics.exclude": ".*[\\-\\.]internal, .*\\.replica, __.*" };

// One regex matching the whole name against any of the comma-separated patterns, or null.
function patternList(key, text) {
  const parts = text.split(",").map((p) => p.trim()).filter((p) => p);
  if (parts.length === 0) return null;
  try {
    return new RegExp(`^(?:${parts.map((p) => `(?:${p})`).join("|")})$`);
  } catch (e) {
    throw `regex-filter: \`${key}\`: invalid regex list \`${text}\`: ${e.message}`;
  }
}

let include = patternList("topics", DEFAULTS.topics);
let exclude = patternList("topics.exclude", DEFAULTS["topics.exclude"]);

const shouldReplicateTopic = (topic) =>
  include !== null && include.test(topic) && !(exclude !== null && exclude.test(topic));

export const topicFilter = {
  configure(config) {
    const values = { ...DEFAULTS };
    for (const [key, value] of config) {
      if (!(key in DEFAULTS)) throw `regex-filter: unknown key \`${key}\`; known keys: ${Object.keys(DEFAULTS).join(", ")}`;
      values[key] = value;
    }
    include = patternList("topics", values.topics);
    exclude = patternList("topics.exclude", values["topics.exclude"]);
  },
  shouldReplicateTopic,
  shouldReplicateTopics: (topics) => topics.map(shouldReplicateTopic),
};
