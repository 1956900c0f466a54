package io.wmobs.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.NullNode;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.types.StringType;

/**
 * The per-policy spec of a wmobs function: its first argument, a string literal (JSON, or for
 * the batch's times the checkpoint location). One function per kind is registered once per
 * session; what differs between policies travels in the call, so a Spark Connect client calls
 * the same functions by name.
 */
final class Spec {
  static final ObjectMapper JSON = new ObjectMapper();

  private Spec() {}

  /** The text of the first of {@code arguments}, which must be a string literal. */
  static String text(String function, List<Expression> arguments) {
    if (arguments.isEmpty()) {
      throw new IllegalArgumentException("wmobs: " + function + " takes its spec first");
    }
    Expression first = arguments.get(0);
    if (!first.foldable() || !(first.dataType() instanceof StringType)) {
      throw new IllegalArgumentException(
          "wmobs: the first argument of " + function + " must be a string literal (its spec), not "
              + first);
    }
    Object value = first.eval(null);
    if (value == null) {
      throw new IllegalArgumentException("wmobs: the spec of " + function + " is null");
    }
    return value.toString();
  }

  /** The first of {@code arguments} as JSON. */
  static JsonNode json(String function, List<Expression> arguments) {
    String text = text(function, arguments);
    try {
      return JSON.readTree(text);
    } catch (IOException e) {
      throw new UncheckedIOException("wmobs: the spec of " + function + " is not JSON: " + text, e);
    }
  }

  /** {@code arguments} without the spec. */
  static List<Expression> rest(List<Expression> arguments) {
    return arguments.subList(1, arguments.size());
  }

  static void arity(String function, List<Expression> arguments, int... allowed) {
    for (int n : allowed) {
      if (arguments.size() == n) {
        return;
      }
    }
    throw new IllegalArgumentException(
        "wmobs: " + function + " takes " + java.util.Arrays.toString(allowed) + " arguments, not "
            + arguments.size());
  }

  /**
   * {@code spec}, the spec of {@code what}, has every member of {@code required} and none but
   * those and {@code optional}: else an error naming the unknown and the missing ones (a
   * misspelled member is never read as a silent default).
   */
  static void members(String what, JsonNode spec, Set<String> required, Set<String> optional) {
    if (!spec.isObject()) {
      throw new IllegalArgumentException("wmobs: the spec of " + what + " is not an object: " + spec);
    }
    Set<String> unknown = new TreeSet<>();
    spec.fieldNames().forEachRemaining(unknown::add);
    Set<String> missing = new TreeSet<>(required);
    missing.removeAll(unknown);
    unknown.removeAll(required);
    unknown.removeAll(optional);
    if (!unknown.isEmpty() || !missing.isEmpty()) {
      throw new IllegalArgumentException(
          "wmobs: the spec of " + what + " has unknown members " + unknown + " and lacks "
              + missing);
    }
  }

  /**
   * A spec read member by member, each as the JSON type its parser takes: a member of another
   * type is an error naming it, never a default (as Jackson's {@code asText}, {@code asLong}
   * and {@code asBoolean} would read it). Which members a spec has is {@link #members}' check.
   */
  static final class Reader {
    private final String what;
    private final JsonNode spec;

    Reader(String what, JsonNode spec) {
      this.what = what;
      this.spec = spec;
    }

    private JsonNode member(String name) {
      JsonNode node = spec.get(name);
      return node == null ? NullNode.getInstance() : node;
    }

    private IllegalArgumentException wrong(String name, String expected, JsonNode found) {
      return new IllegalArgumentException(
          "wmobs: the spec of " + what + ": " + name + " must be " + expected + ", not " + found);
    }

    String text(String name) {
      JsonNode node = member(name);
      if (!node.isTextual()) {
        throw wrong(name, "a string", node);
      }
      return node.textValue();
    }

    /** A string member, or null where it is null. */
    String textOrNull(String name) {
      return member(name).isNull() ? null : text(name);
    }

    long integer(String name) {
      JsonNode node = member(name);
      if (!is('i', node)) {
        throw wrong(name, "an integer", node);
      }
      return node.longValue();
    }

    /** An integer member, or {@code none} where it is null. */
    long integerOr(String name, long none) {
      return member(name).isNull() ? none : integer(name);
    }

    boolean bool(String name) {
      JsonNode node = member(name);
      if (!node.isBoolean()) {
        throw wrong(name, "true or false", node);
      }
      return node.booleanValue();
    }

    List<String> texts(String name) {
      List<String> texts = new ArrayList<>();
      elements(name, "a list of strings", member(name), 's').forEach(e -> texts.add(e.textValue()));
      return texts;
    }

    long[] integers(String name) {
      return longs(elements(name, "a list of integers", member(name), 'i'));
    }

    /** A list of lists of integers. */
    List<long[]> integerLists(String name) {
      String expected = "a list of lists of integers";
      List<long[]> lists = new ArrayList<>();
      for (JsonNode list : elements(name, expected, member(name), '[')) {
        lists.add(longs(elements(name, expected, list, 'i')));
      }
      return lists;
    }

    /**
     * A list of tuples, each a list of the kinds {@code kinds} says ({@code s} a string, {@code
     * i} an integer), e.g. {@code [[rule, bit], ...]} for {@code "si"}.
     */
    List<JsonNode> tuples(String name, String kinds) {
      String expected = "a list of [" + kinds + "] (s: a string, i: an integer)";
      List<JsonNode> tuples = elements(name, expected, member(name), '[');
      for (JsonNode tuple : tuples) {
        boolean fits = tuple.size() == kinds.length();
        for (int i = 0; fits && i < kinds.length(); i++) {
          fits = is(kinds.charAt(i), tuple.get(i));
        }
        if (!fits) {
          throw wrong(name, expected, member(name));
        }
      }
      return tuples;
    }

    /** The elements of {@code list} (which must be a list), each of {@code kind}. */
    private List<JsonNode> elements(String name, String expected, JsonNode list, char kind) {
      if (!list.isArray()) {
        throw wrong(name, expected, member(name));
      }
      List<JsonNode> found = new ArrayList<>();
      for (JsonNode value : list) {
        if (!is(kind, value)) {
          throw wrong(name, expected, member(name));
        }
        found.add(value);
      }
      return found;
    }

    /** {@code value} is of {@code kind}: {@code s} a string, {@code i} a long, {@code [} a list. */
    private static boolean is(char kind, JsonNode value) {
      return switch (kind) {
        case 's' -> value.isTextual();
        case 'i' -> value.isIntegralNumber() && value.canConvertToLong();
        default -> value.isArray();
      };
    }

    private static long[] longs(List<JsonNode> values) {
      long[] longs = new long[values.size()];
      for (int i = 0; i < longs.length; i++) {
        longs[i] = values.get(i).longValue();
      }
      return longs;
    }

    /** A nested spec with exactly {@code members}, or null where the member is null. */
    Reader objectOrNull(String name, Set<String> members) {
      JsonNode node = member(name);
      if (node.isNull()) {
        return null;
      }
      if (!node.isObject()) {
        throw wrong(name, "an object or null", node);
      }
      String nested = what + "'s " + name;
      Spec.members(nested, node, members, Set.of());
      return new Reader(nested, node);
    }
  }
}
