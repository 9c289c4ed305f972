// prefix-policy: a kmirror replication policy in JavaScript.
//
// `orders` mirrored from `us-west` becomes `prod-us-west.orders` on the target, and the name
// reverses exactly. Configuration: `prefix` (default `prod-`) marks remote topics,
// `separator` (default `.`) separates the source alias from the topic. Multi-hop names
// nest: `prod-b.prod-a.orders` came from `b`, which had it from `a`. Internal topics follow
// MM2. A function returning `undefined` answers WIT's `none`; throwing a string from
// `configure` refuses the configuration.
//
// Build: `kmirror plugin build`  Check: `kmirror plugin check prefix-policy.wasm`

const KNOWN_KEYS = ["prefix", "separator"];
const settings = { prefix: "prod-", separator: "." };

// [source alias, upstream topic] of a remote name, or undefined.
function split(topic) {
  const { prefix, separator } = settings;
  if (!topic.startsWith(prefix)) return undefined;
  const rest = topic.slice(prefix.length);
  const at = rest.indexOf(separator);
  if (at < 0) return undefined;
  const upstream = rest.slice(at + separator.length);
  return upstream ? [rest.slice(0, at), upstream] : undefined;
}

// The naming scheme: change these three.
const formatRemoteTopic = (alias, topic) => `${settings.prefix}${alias}${settings.separator}${topic}`;
const topicSource = (topic) => split(topic)?.[0];
const upstreamTopic = (topic) => split(topic)?.[1];

// MM2's rules for the rest.
function originalTopic(topic) {
  for (let i = 0; i <= topic.length; i++) {
    const upstream = upstreamTopic(topic);
    if (upstream === undefined || upstream === topic) break;
    topic = upstream;
  }
  return topic;
}
const isCheckpointsTopic = (t) => t.endsWith(".checkpoints.internal");
const isMm2InternalTopic = (t) => t.endsWith(".internal") && (t.startsWith("mm2") || isCheckpointsTopic(t));

export const replicationPolicy = {
  configure(config) {
    for (const [key, value] of config) {
      if (!KNOWN_KEYS.includes(key)) throw `prefix-policy: unknown key \`${key}\`; known keys: ${KNOWN_KEYS.join(", ")}`;
      settings[key] = value;
    }
    if (!settings.prefix || !settings.separator) throw "prefix-policy: `prefix` and `separator` must not be empty";
  },
  formatRemoteTopic,
  topicSource,
  upstreamTopic,
  originalTopic,
  heartbeatsTopic: () => "heartbeats",
  offsetSyncsTopic: (alias) => `mm2-offset-syncs.${alias}.internal`,
  checkpointsTopic: (alias) => `${alias}.checkpoints.internal`,
  isHeartbeatsTopic: (t) => originalTopic(t) === "heartbeats",
  isCheckpointsTopic,
  isMm2InternalTopic,
  isInternalTopic: (t) =>
    t.startsWith("__") || t.startsWith(".") || t.endsWith(".internal") || t.endsWith("-internal") || isMm2InternalTopic(t),
  formatRemoteTopics: (alias, topics) => topics.map((t) => formatRemoteTopic(alias, t)),
};
