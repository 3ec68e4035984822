package io.moldau.oracle;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.File;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Runs the Java client against a broker as the end-to-end tests describe it, so that one JVM
 * does a whole scenario. Usage: {@code ClientDriver SPEC.json}; the spec is
 * {@code {"bootstrap": "host:port", "steps": [{"op": ...}, ...]}} and the result, one entry per
 * step, is printed to stdout as JSON. Keys, values and header values travel as base64 (null
 * stays null) so the tests compare them byte for byte.
 *
 * <p>Clients are built with the library's defaults plus only what a step names, because the
 * point is to see what an unmodified application sees.
 */
public final class ClientDriver {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final Base64.Encoder B64 = Base64.getEncoder();
    private static final Base64.Decoder UNB64 = Base64.getDecoder();

    private final String bootstrap;

    private ClientDriver(String bootstrap) {
        this.bootstrap = bootstrap;
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 1) {
            System.err.println("usage: ClientDriver SPEC.json");
            System.exit(2);
        }
        JsonNode spec = JSON.readTree(new File(args[0]));
        ClientDriver driver = new ClientDriver(spec.get("bootstrap").asText());
        ArrayNode results = JSON.createArrayNode();
        for (JsonNode step : spec.get("steps")) {
            String op = step.get("op").asText();
            long started = System.nanoTime();
            ObjectNode result;
            switch (op) {
                case "create_topic":
                    result = driver.createTopic(step);
                    break;
                case "produce":
                    result = driver.produce(step);
                    break;
                case "consume":
                    result = driver.consume(step);
                    break;
                case "commit":
                    result = driver.commit(step);
                    break;
                case "transactions":
                    result = driver.transactions(step);
                    break;
                default:
                    throw new IllegalArgumentException("unknown op " + op);
            }
            result.put("op", op);
            result.put("elapsed_ms", TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - started));
            results.add(result);
        }
        ObjectNode out = JSON.createObjectNode();
        out.set("results", results);
        System.out.println(JSON.writeValueAsString(out));
        System.out.flush();
        // Client threads are closed already; exit without waiting for stray daemon threads.
        System.exit(0);
    }

    private static Map<String, Object> settings(JsonNode config) {
        Map<String, Object> map = new HashMap<>();
        if (config != null) {
            for (Map.Entry<String, JsonNode> field : config.properties()) {
                map.put(field.getKey(), field.getValue().asText());
            }
        }
        return map;
    }

    private static byte[] bytes(JsonNode node) {
        return node == null || node.isNull() ? null : UNB64.decode(node.asText());
    }

    private static String text(byte[] data) {
        return data == null ? null : B64.encodeToString(data);
    }

    private ObjectNode createTopic(JsonNode step) throws Exception {
        Map<String, Object> config = settings(step.get("config"));
        config.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(config)) {
            NewTopic topic = new NewTopic(step.get("name").asText(),
                    step.path("partitions").asInt(1), (short) 1);
            Map<String, String> configs = new HashMap<>();
            settings(step.get("configs")).forEach((k, v) -> configs.put(k, (String) v));
            topic.configs(configs);
            admin.createTopics(List.of(topic)).all().get(30, TimeUnit.SECONDS);
        }
        return JSON.createObjectNode();
    }

    /** Sends every record of the step with one producer; returns where each one landed. */
    private ObjectNode produce(JsonNode step) throws Exception {
        Map<String, Object> config = settings(step.get("config"));
        config.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        config.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class);
        config.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class);
        String topic = step.get("topic").asText();
        List<Future<RecordMetadata>> sent = new ArrayList<>();
        ObjectNode result = JSON.createObjectNode();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(config)) {
            for (JsonNode rec : step.get("records")) {
                RecordHeaders headers = new RecordHeaders();
                for (JsonNode header : rec.path("headers")) {
                    headers.add(header.get(0).asText(), bytes(header.get(1)));
                }
                Integer partition = rec.hasNonNull("partition") ? rec.get("partition").asInt() : null;
                Long timestamp = rec.hasNonNull("timestamp") ? rec.get("timestamp").asLong() : null;
                sent.add(producer.send(new ProducerRecord<>(topic, partition, timestamp,
                        bytes(rec.get("key")), bytes(rec.get("value")), headers)));
            }
            producer.flush();
            ArrayNode offsets = result.putArray("offsets");
            ArrayNode partitions = result.putArray("partitions");
            for (Future<RecordMetadata> future : sent) {
                RecordMetadata metadata = future.get(60, TimeUnit.SECONDS);
                offsets.add(metadata.offset());
                partitions.add(metadata.partition());
            }
        }
        return result;
    }

    /**
     * Joins a group (subscribe), polls until {@code count} records arrived, optionally commits
     * synchronously, and reports the records, the assignment and the committed offsets.
     */
    private ObjectNode consume(JsonNode step) throws Exception {
        Map<String, Object> config = settings(step.get("config"));
        config.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        config.put(ConsumerConfig.GROUP_ID_CONFIG, step.get("group").asText());
        config.putIfAbsent(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "classic");
        config.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        config.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        List<String> topics = new ArrayList<>();
        for (JsonNode topic : step.get("topics")) {
            topics.add(topic.asText());
        }
        int count = step.get("count").asInt();
        long deadline = System.currentTimeMillis() + step.path("timeout_ms").asLong(60_000);
        long linger = step.path("linger_ms").asLong(0);
        ObjectNode result = JSON.createObjectNode();
        ArrayNode records = result.putArray("records");
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(config)) {
            consumer.subscribe(topics);
            int got = 0;
            while (got < count && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<byte[], byte[]> rec : consumer.poll(Duration.ofMillis(200))) {
                    records.add(record(rec));
                    got++;
                }
            }
            // Optionally keep polling a little to catch records beyond the expected count.
            long lingerEnd = System.currentTimeMillis() + linger;
            while (System.currentTimeMillis() < lingerEnd) {
                for (ConsumerRecord<byte[], byte[]> rec : consumer.poll(Duration.ofMillis(100))) {
                    records.add(record(rec));
                }
            }
            if (step.path("commit").asBoolean(true)) {
                consumer.commitSync(Duration.ofSeconds(30));
            }
            Set<TopicPartition> assignment = consumer.assignment();
            ArrayNode assigned = result.putArray("assignment");
            for (TopicPartition tp : assignment) {
                assigned.add(tp.topic() + ":" + tp.partition());
            }
            result.set("committed", offsets(consumer.committed(assignment, Duration.ofSeconds(30))));
        }
        return result;
    }

    /** Commits the given offsets for a group without consuming (manual assignment). */
    private ObjectNode commit(JsonNode step) throws Exception {
        Map<String, Object> config = settings(step.get("config"));
        config.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        config.put(ConsumerConfig.GROUP_ID_CONFIG, step.get("group").asText());
        config.putIfAbsent(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "classic");
        config.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        config.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
        for (Map.Entry<String, JsonNode> field : step.get("offsets").properties()) {
            int colon = field.getKey().lastIndexOf(':');
            offsets.put(new TopicPartition(field.getKey().substring(0, colon),
                    Integer.parseInt(field.getKey().substring(colon + 1))),
                    new OffsetAndMetadata(field.getValue().asLong()));
        }
        ObjectNode result = JSON.createObjectNode();
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(config)) {
            consumer.assign(offsets.keySet());
            consumer.commitSync(offsets, Duration.ofSeconds(30));
            result.set("committed",
                    offsets(consumer.committed(new HashSet<>(offsets.keySet()), Duration.ofSeconds(30))));
        }
        return result;
    }

    /**
     * Transactional producers sharing one transactional id ({@code "producers"} of them),
     * driven through {@code "actions"} in order: {@code {"producer": n, "do": "init" | "begin" |
     * "send" | "commit" | "abort", "values": [...]}} ("send" writes the values to partition 0
     * of {@code "topic"} and flushes). The outcome of each action is "ok" or the simple name of
     * the exception it threw, so a fenced producer shows as ProducerFencedException.
     */
    private ObjectNode transactions(JsonNode step) throws Exception {
        Map<String, Object> config = settings(step.get("config"));
        config.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        config.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class);
        config.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class);
        config.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, step.get("transactional_id").asText());
        String topic = step.get("topic").asText();
        List<KafkaProducer<byte[], byte[]>> producers = new ArrayList<>();
        ObjectNode result = JSON.createObjectNode();
        ArrayNode outcomes = result.putArray("outcomes");
        try {
            for (int i = 0; i < step.get("producers").asInt(); i++) {
                producers.add(new KafkaProducer<>(config));
            }
            for (JsonNode action : step.get("actions")) {
                KafkaProducer<byte[], byte[]> producer = producers.get(action.get("producer").asInt());
                try {
                    switch (action.get("do").asText()) {
                        case "init" -> producer.initTransactions();
                        case "begin" -> producer.beginTransaction();
                        case "send" -> {
                            for (JsonNode value : action.get("values")) {
                                producer.send(new ProducerRecord<>(topic, 0, null, bytes(value)));
                            }
                            producer.flush();
                        }
                        case "commit" -> producer.commitTransaction();
                        case "abort" -> producer.abortTransaction();
                        default -> throw new IllegalArgumentException("unknown action " + action);
                    }
                    outcomes.add("ok");
                } catch (org.apache.kafka.common.KafkaException e) {
                    outcomes.add(e.getClass().getSimpleName());
                }
            }
        } finally {
            for (KafkaProducer<byte[], byte[]> producer : producers) {
                producer.close(Duration.ofSeconds(5));
            }
        }
        return result;
    }

    private static ObjectNode offsets(Map<TopicPartition, OffsetAndMetadata> committed) {
        ObjectNode node = JSON.createObjectNode();
        for (Map.Entry<TopicPartition, OffsetAndMetadata> entry : committed.entrySet()) {
            String name = entry.getKey().topic() + ":" + entry.getKey().partition();
            if (entry.getValue() == null) {
                node.putNull(name);
            } else {
                node.put(name, entry.getValue().offset());
            }
        }
        return node;
    }

    private static ObjectNode record(ConsumerRecord<byte[], byte[]> rec) {
        ObjectNode node = JSON.createObjectNode();
        node.put("topic", rec.topic());
        node.put("partition", rec.partition());
        node.put("offset", rec.offset());
        node.put("timestamp", rec.timestamp());
        node.put("timestamp_type", rec.timestampType().name);
        node.put("key", text(rec.key()));
        node.put("value", text(rec.value()));
        ArrayNode headers = node.putArray("headers");
        for (Header header : rec.headers()) {
            ArrayNode pair = headers.addArray();
            pair.add(header.key());
            pair.add(text(header.value()));
        }
        return node;
    }
}
