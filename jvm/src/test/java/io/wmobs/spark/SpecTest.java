package io.wmobs.spark;

import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.ObjectMapper;
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
    com.fasterxml.jackson.databind.JsonNode reference = ReferenceTest.load("jvm_specs.json");
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
      com.fasterxml.jackson.databind.JsonNode spec = reference.get("specs").get(function);
      org.junit.jupiter.api.Assertions.assertEquals(
          names(spec.get("members")), parsers.get(function)[0], function);
      org.junit.jupiter.api.Assertions.assertEquals(
          names(spec.get("optional")), parsers.get(function)[1], function);
    }
    com.fasterxml.jackson.databind.JsonNode nested = reference.get("nested");
    org.junit.jupiter.api.Assertions.assertEquals(
        names(nested.get("wmobs_policy_observation.histogram")), Observation.HISTOGRAM);
    org.junit.jupiter.api.Assertions.assertEquals(
        names(nested.get("wmobs_policy_observation.queueing")), Observation.QUEUEING);
    org.junit.jupiter.api.Assertions.assertEquals(
        names(nested.get("wmobs_policy_observation.kept")), Observation.KEPT);
  }

  @SuppressWarnings("unchecked")
  private static Set<String>[] sets(Set<String> members, Set<String> optional) {
    return new Set[] {new java.util.TreeSet<>(members), new java.util.TreeSet<>(optional)};
  }

  private static Set<String> names(com.fasterxml.jackson.databind.JsonNode list) {
    Set<String> found = new java.util.TreeSet<>();
    list.forEach(name -> found.add(name.asText()));
    return found;
  }
}
