package io.wmobs.spark;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.IOException;
import java.util.Map;
import java.util.Set;
import org.junit.jupiter.api.Test;

/** SQL's policy options read as the Python API reads them: the same reference cases. */
class PolicyOptionsTest {
  @Test
  void durationsAsPythonReadsThem() throws IOException {
    for (JsonNode found : ReferenceTest.load("durations.json").get("cases")) {
      String text = found.get("text").asText();
      if (found.has("us")) {
        assertEquals(found.get("us").asLong(), PolicyOptions.micros(text, "late_arrival"), text);
      } else {
        IllegalArgumentException error =
            assertThrows(
                IllegalArgumentException.class, () -> PolicyOptions.micros(text, "late_arrival"));
        assertTrue(error.getMessage().startsWith("late_arrival: "), error.getMessage());
        assertTrue(error.getMessage().contains(found.get("error").asText()), error.getMessage());
      }
    }
  }

  @Test
  void histogramBoundsAsTheListenerReadsThem() throws IOException {
    JsonNode buckets = ReferenceTest.load("histogram_buckets.json");
    for (String histogram : new String[] {"arrival_delay", "lateness", "queueing_delay"}) {
      JsonNode bounds = buckets.get(histogram).get("bounds_us");
      long[] expected = new long[bounds.size()];
      for (int i = 0; i < expected.length; i++) {
        expected[i] = bounds.get(i).asLong();
      }
      assertArrayEquals(expected, PolicyPlan.boundsUs(histogram), histogram);
    }
  }

  @Test
  void defaultsAndErrorsNameTheOption() {
    PolicyOptions defaults = PolicyOptions.of(Map.of(), Set.of("EventTime"));
    assertEquals("EventTime", defaults.eventTime());
    assertEquals(null, defaults.arrivalTime()); // no ArrivalTime column: the batch's time
    assertEquals(300_000_000L, defaults.earlyArrivalUs());
    assertEquals(5_000_000L, defaults.lateArrivalUs());
    assertEquals("EventTime", defaults.name());
    PolicyOptions arrival = PolicyOptions.of(Map.of(), Set.of("EventTime", "ArrivalTime"));
    assertEquals("ArrivalTime", arrival.arrivalTime());
    IllegalArgumentException unknown =
        assertThrows(
            IllegalArgumentException.class,
            () -> PolicyOptions.of(Map.of("late_arival", "1 s"), Set.of()));
    assertTrue(unknown.getMessage().contains("no option late_arival"), unknown.getMessage());
    IllegalArgumentException skew =
        assertThrows(
            IllegalArgumentException.class,
            () -> PolicyOptions.of(Map.of("substream_skew", "1 s"), Set.of()));
    assertTrue(skew.getMessage().startsWith("substream_skew: "), skew.getMessage());
  }
}
