// MirrorMaker 2's own client reading what kmirror wrote: prints the offsets of consumer
// group GROUP on the target cluster that MM2's RemoteClusterUtils.translateOffsets derives
// from the checkpoints of source alias SOURCE_ALIAS (topic <SOURCE_ALIAS>.checkpoints.internal
// on the target), one "topic partition offset" line each, sorted.
//
//   java -cp "$(scripts/kafka.sh lib)/*" tests/kafka/Translate.java TARGET_BOOTSTRAP SOURCE_ALIAS GROUP
//
// Run by tests/e2e/takeover.rs (a single-file program: the JDK compiles it on the fly).
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.TreeMap;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.connect.mirror.RemoteClusterUtils;

public class Translate {
    public static void main(String[] args) throws Exception {
        if (args.length != 3) {
            System.err.println("usage: Translate TARGET_BOOTSTRAP SOURCE_ALIAS GROUP");
            System.exit(2);
        }
        Map<String, Object> props = new HashMap<>();
        props.put("bootstrap.servers", args[0]);
        Map<TopicPartition, OffsetAndMetadata> offsets =
            RemoteClusterUtils.translateOffsets(props, args[1], args[2], Duration.ofSeconds(30));
        Map<String, Long> sorted = new TreeMap<>();
        for (Map.Entry<TopicPartition, OffsetAndMetadata> e : offsets.entrySet()) {
            sorted.put(e.getKey().topic() + " " + e.getKey().partition(), e.getValue().offset());
        }
        for (Map.Entry<String, Long> e : sorted.entrySet()) {
            System.out.println(e.getKey() + " " + e.getValue());
        }
    }
}
