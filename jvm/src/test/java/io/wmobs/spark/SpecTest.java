package io.wmobs.spark;

import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.junit.jupiter.api.Test;

/** A spec is read once, and a misspelled member is an error naming it, never a default. */
class SpecTest {
  private static final ObjectMapper JSON = new ObjectMapper();

  @Test
  void aSpecWithAnUnknownOrMissingMemberIsRefusedByName() throws Exception {
    IllegalArgumentException error =
        assertThrows(
            IllegalArgumentException.class,
            () ->
                Spec.members(
                    "wmobs_dead_letters",
                    JSON.readTree("{\"directory\": \"/x\", \"polciy\": \"p\", \"rules\": []}"),
                    Set.of("directory", "rules", "policy"),
                    Set.of()));
    assertTrue(error.getMessage().contains("unknown members [polciy]"), error.getMessage());
    assertTrue(error.getMessage().contains("lacks [policy]"), error.getMessage());
  }

  @Test
  void optionalMembersMayBeAbsentOrPresent() throws Exception {
    Set<String> required = Set.of("directory");
    Spec.members("f", JSON.readTree("{\"directory\": \"/x\"}"), required, Set.of("columns"));
    Spec.members(
        "f", JSON.readTree("{\"directory\": \"/x\", \"columns\": []}"), required, Set.of("columns"));
    assertThrows(
        IllegalArgumentException.class,
        () -> Spec.members("f", JSON.readTree("[1]"), required, Set.of()));
  }

  /** The members each parser reads, as the Python side's dataclasses write them. */
  @Test
  void everySpecHasTheMembersPythonWrites() throws Exception {
    JsonNode reference = ReferenceTest.load("jvm_specs.json");
    java.util.Map<String, Set<String>[]> parsers =
        java.util.Map.of(
            "wmobs_judge", sets(PolicyRules.MEMBERS, Set.of()),
            "wmobs_policy_observation", sets(Observation.MEMBERS, Set.of()),
            "wmobs_substreams", sets(Substreams.Settings.MEMBERS, Substreams.Settings.OPTIONAL),
            "wmobs_dead_letters", sets(DeadLetterWriter.MEMBERS, DeadLetterWriter.OPTIONAL));
    java.util.Set<String> listed = new java.util.TreeSet<>();
    reference.get("specs").fieldNames().forEachRemaining(listed::add);
    org.junit.jupiter.api.Assertions.assertEquals(new java.util.TreeSet<>(parsers.keySet()), listed);
    for (String function : listed) {
      JsonNode spec = reference.get("specs").get(function);
      org.junit.jupiter.api.Assertions.assertEquals(
          names(spec.get("members")), parsers.get(function)[0], function);
      org.junit.jupiter.api.Assertions.assertEquals(
          names(spec.get("optional")), parsers.get(function)[1], function);
    }
    JsonNode nested = reference.get("nested");
    org.junit.jupiter.api.Assertions.assertEquals(
        names(nested.get("wmobs_policy_observation.histogram")), Observation.HISTOGRAM);
    org.junit.jupiter.api.Assertions.assertEquals(
        names(nested.get("wmobs_policy_observation.queueing")), Observation.QUEUEING);
    org.junit.jupiter.api.Assertions.assertEquals(
        names(nested.get("wmobs_policy_observation.kept")), Observation.KEPT);
  }

  /** Every example spec as the Python side writes it, parsed by its function's parser. */
  @Test
  void everyExampleSpecParses() throws Exception {
    List<Map.Entry<String, JsonNode>> examples = examples();
    examples.forEach(example -> parse(example.getKey(), example.getValue()));
    assertTrue(examples.size() >= 4, "examples: " + examples.size());
  }

  /** (function, example spec) of each example in the reference. */
  private static List<Map.Entry<String, JsonNode>> examples() throws Exception {
    JsonNode examples = ReferenceTest.load("jvm_specs.json").get("examples");
    List<Map.Entry<String, JsonNode>> all = new ArrayList<>();
    for (Iterator<String> it = examples.fieldNames(); it.hasNext(); ) {
      String function = it.next();
      examples.get(function).forEach(example -> all.add(Map.entry(function, example)));
    }
    return all;
  }

  /**
   * Each member of each example (nested ones too), given a value of another JSON type, is
   * refused with an error naming it: never read as a default.
   */
  @Test
  void aMemberOfAnotherTypeIsRefusedByName() throws Exception {
    int refused = 0;
    for (Map.Entry<String, JsonNode> entry : examples()) {
      String function = entry.getKey();
      JsonNode example = entry.getValue();
      for (Iterator<String> names = example.fieldNames(); names.hasNext(); ) {
        String member = names.next();
        JsonNode value = example.get(member);
        refused += refuses(function, example, member, null, value);
        if (value.isObject()) {
          for (Iterator<String> inner = value.fieldNames(); inner.hasNext(); ) {
            String nested = inner.next();
            refused += refuses(function, example, member, nested, value.get(nested));
          }
        }
      }
    }
    assertTrue(refused > 60, "refused: " + refused);
  }

  private static int refuses(
      String function, JsonNode example, String member, String nested, JsonNode value) {
    ObjectNode spec = example.deepCopy();
    ObjectNode holder =
        nested == null ? spec : (ObjectNode) spec.get(member);
    String name = nested == null ? member : nested;
    holder.set(name, otherType(value));
    IllegalArgumentException error =
        assertThrows(
            IllegalArgumentException.class,
            () -> parse(function, spec),
            function + "." + member + (nested == null ? "" : "." + nested));
    // Spec.Reader's words exactly: a short name ("ts") is inside longer ones ("candidate_bits").
    assertTrue(error.getMessage().contains(": " + name + " must be "), error.getMessage());
    return 1;
  }

  /** A value of another JSON type than {@code value}'s. */
  private static JsonNode otherType(JsonNode value) {
    JsonNodeFactory nodes =
        JsonNodeFactory.instance;
    if (value.isTextual()) {
      return nodes.numberNode(7);
    }
    if (value.isNumber() || value.isBoolean()) {
      return nodes.textNode(value.asText());
    }
    if (value.isNull()) {
      return nodes.arrayNode();
    }
    return value.isArray() ? nodes.textNode("[]") : nodes.numberNode(7);
  }

  /** {@code spec} parsed as {@code function}'s call parses it. */
  private static void parse(String function, JsonNode spec) {
    switch (function) {
      case "wmobs_judge" -> {
        Spec.members(function, spec, PolicyRules.MEMBERS, Set.of());
        PolicyRules.of(spec);
        PolicyRules.field(function, spec);
      }
      case "wmobs_policy_observation" -> Observation.of(spec, function);
      case "wmobs_substreams" -> Substreams.Settings.parse(spec.toString());
      case "wmobs_dead_letters" -> new DeadLetterWriter(spec, null);
      default -> throw new AssertionError("no parser for " + function);
    }
  }

  @SuppressWarnings("unchecked")
  private static Set<String>[] sets(Set<String> members, Set<String> optional) {
    return new Set[] {new java.util.TreeSet<>(members), new java.util.TreeSet<>(optional)};
  }

  private static Set<String> names(JsonNode list) {
    Set<String> found = new java.util.TreeSet<>();
    list.forEach(name -> found.add(name.asText()));
    return found;
  }
}
