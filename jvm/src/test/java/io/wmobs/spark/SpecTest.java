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
}
