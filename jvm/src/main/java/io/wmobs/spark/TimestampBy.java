package io.wmobs.spark;

import java.lang.reflect.InvocationHandler;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Proxy;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Set;
import java.util.regex.Pattern;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.parser.ParserInterface;

/**
 * Azure Stream Analytics' own clause in Spark SQL:
 *
 * <pre>
 * SELECT ... FROM events TIMESTAMP BY EventTime OVER deviceId ...
 * </pre>
 *
 * is read as {@code FROM wmobs_time_policy(TABLE(events), event_time => 'EventTime',
 * substream_by => 'deviceId', name => 'events') AS events}, the {@link PolicyTable} function
 * (the policy named after its input); its other options come from the session's {@code
 * spark.wmobs.sql.<option>} settings, as ASA's tolerances come from the job's, not the query.
 * The event time may be an expression ({@code TIMESTAMP BY CAST(ts AS TIMESTAMP)}): it is then
 * computed into a column {@value #COMPUTED} of the input.
 *
 * <p>The session's parser reads every statement first; only a statement it refuses is read
 * again, rewritten, when it has the clause. So Spark's SQL, and another extension's, is never
 * touched.
 */
public final class TimestampBy {
  /** The column an event-time expression is computed into. */
  static final String COMPUTED = "wmobs_event_time";

  private static final Set<String> PARSE =
      Set.of("parsePlan", "parseQuery", "parsePlanWithParameters");

  /** Where the expression after {@code TIMESTAMP BY} ends (at its own depth). */
  private static final Set<String> CLAUSES =
      Set.of(
          "OVER", "WHERE", "GROUP", "HAVING", "ORDER", "LIMIT", "OFFSET", "JOIN", "INNER", "LEFT",
          "RIGHT", "FULL", "CROSS", "NATURAL", "ANTI", "SEMI", "ON", "USING", "UNION", "EXCEPT",
          "INTERSECT", "MINUS", "WINDOW", "LATERAL", "CLUSTER", "DISTRIBUTE", "SORT", "QUALIFY",
          "PIVOT", "UNPIVOT", "TABLESAMPLE", "WATERMARK");

  /** A number, not a name: digits, with a literal's suffix or an exponent. */
  private static final Pattern NUMBER =
      Pattern.compile("[0-9]+(?:[LSYDF]|BD|E[0-9]+)?", Pattern.CASE_INSENSITIVE);

  private TimestampBy() {}

  /** {@code delegate} reading {@code TIMESTAMP BY ... [OVER ...]} too (for any session). */
  public static ParserInterface parser(SparkSession session, ParserInterface delegate) {
    InvocationHandler handler = (proxy, method, args) -> call(delegate, method, args);
    return (ParserInterface)
        Proxy.newProxyInstance(
            TimestampBy.class.getClassLoader(), new Class<?>[] {ParserInterface.class}, handler);
  }

  private static Object call(ParserInterface delegate, Method method, Object[] args)
      throws Throwable {
    if (method.getDeclaringClass() == Object.class) {
      return switch (method.getName()) {
        case "toString" -> "TimestampBy(" + delegate + ")";
        case "hashCode" -> System.identityHashCode(delegate);
        default -> method.invoke(delegate, args);
      };
    }
    try {
      return method.invoke(delegate, args);
    } catch (InvocationTargetException failed) {
      Throwable cause = failed.getCause();
      if (!PARSE.contains(method.getName())
          || !cause.getClass().getName().endsWith(".ParseException")
          || !(args[0] instanceof String sql)) {
        throw cause;
      }
      String rewritten = rewrite(sql);
      if (rewritten == null) {
        throw cause;
      }
      Object[] again = args.clone();
      again[0] = rewritten;
      try {
        return method.invoke(delegate, again);
      } catch (InvocationTargetException still) {
        throw still.getCause(); // its message shows the statement as it was rewritten
      }
    }
  }

  /**
   * {@code sql} with each {@code TIMESTAMP BY} clause as a call of {@code wmobs_time_policy};
   * null when it has no such clause.
   */
  public static String rewrite(String sql) {
    List<Token> tokens = Token.read(sql);
    StringBuilder out = new StringBuilder();
    int copied = 0; // the end of the text copied so far
    boolean any = false;
    Set<String> named = new java.util.HashSet<>(); // each input's policy has a name of its own
    for (int at = 0; at + 1 < tokens.size(); at++) {
      if (!tokens.get(at).is("TIMESTAMP") || !tokens.get(at + 1).is("BY")) {
        continue;
      }
      Clause clause = Clause.read(sql, tokens, at);
      if (clause.start < copied) {
        throw error("TIMESTAMP BY follows TIMESTAMP BY", sql, tokens.get(at));
      }
      String name = clause.policyName();
      if (!named.add(name == null ? "" : name.toLowerCase(Locale.ROOT))) {
        throw error(
            name == null
                ? "two inputs with TIMESTAMP BY have no name; give each subquery an alias"
                : "two inputs with TIMESTAMP BY are named '" + name + "', which names their"
                    + " policies; give each an alias (FROM db1.events AS a TIMESTAMP BY ...)",
            sql,
            tokens.get(at));
      }
      out.append(sql, copied, clause.start).append(clause.call());
      copied = clause.end;
      at = clause.next - 1;
      any = true;
    }
    return any ? out.append(sql.substring(copied)).toString() : null;
  }

  static IllegalArgumentException error(String what, String sql, Token near) {
    int line = 1 + (int) sql.substring(0, near.start).chars().filter(c -> c == '\n').count();
    return new IllegalArgumentException(
        "wmobs: " + what + " (line " + line + ", at '" + near.text(sql) + "'); the clause is"
            + " FROM <table or view> [[AS] alias] TIMESTAMP BY <event time> [OVER <key>, ...]");
  }

  /**
   * One {@code <relation> [[AS] alias] TIMESTAMP BY <expression> [OVER <key>, ...]}: the text
   * it spans ({@code start} to {@code end}) and the token after it ({@code next}).
   */
  private record Clause(
      int start,
      int end,
      int next,
      String relation,
      boolean plainName,
      String givenAlias,
      String alias,
      String eventTime,
      String computed,
      List<String> keys) {

    static Clause read(String sql, List<Token> tokens, int timestamp) {
      // The relation: back to the FROM, JOIN or ',' before it, at its own depth.
      int from = timestamp - 1;
      int depth = 0;
      while (from >= 0) {
        Token token = tokens.get(from);
        depth += token.is(")") ? 1 : token.is("(") ? -1 : 0;
        if (depth < 0 || depth == 0 && (token.is("FROM") || token.is("JOIN") || token.is(","))) {
          break;
        }
        from--;
      }
      if (from < 0 || depth < 0 || from + 1 == timestamp) {
        throw error("TIMESTAMP BY follows no table in a FROM clause", sql, tokens.get(timestamp));
      }
      List<Token> relation = tokens.subList(from + 1, timestamp);
      boolean stream = relation.get(0).is("STREAM") && relation.size() > 1;
      int i = stream ? 1 : 0;
      boolean subquery = relation.get(i).is("(");
      String named = null; // events, of db.events
      List<String> qualifier = List.of(); // what may qualify its columns: db, events
      if (subquery) {
        int close = closing(relation, i);
        if (stream && close > i + 1 && dotted(relation, i + 1) == close) { // STREAM(db.events)
          named = relation.get(close - 1).text(sql);
          qualifier = names(sql, relation, i + 1, close);
        }
        i = close + 1;
      } else {
        int after = dotted(relation, i);
        if (after == i) {
          throw error("TIMESTAMP BY follows no table", sql, relation.get(i));
        }
        named = relation.get(after - 1).text(sql);
        qualifier = names(sql, relation, i, after);
        i = after;
      }
      String relationText = sql.substring(relation.get(0).start, relation.get(i - 1).end);
      if (i < relation.size() && relation.get(i).is("AS")) {
        i++;
      }
      String given = null;
      if (i < relation.size() && relation.get(i).word()) {
        given = relation.get(i).text(sql);
        qualifier = List.of(relation.get(i).name(sql)); // an alias hides the table's name
        i++;
      }
      if (i != relation.size()) {
        throw error("TIMESTAMP BY follows more than a table", sql, relation.get(i));
      }
      // The event time: up to the next clause, at its own depth.
      int first = timestamp + 2;
      int end = first;
      depth = 0;
      while (end < tokens.size()) {
        Token token = tokens.get(end);
        if (depth == 0
            && (token.is(")") || token.is(",") || token.is(";") || token.clause()
                || token.is("|") && end + 1 < tokens.size() && tokens.get(end + 1).is(">")
                    && tokens.get(end + 1).start == token.end)) { // a pipe, |>
          break;
        }
        depth += token.is("(") ? 1 : token.is(")") ? -1 : 0;
        end++;
      }
      if (end == first) {
        throw error("TIMESTAMP BY names no event time", sql, tokens.get(timestamp + 1));
      }
      List<Token> expression = tokens.subList(first, end);
      String eventTime = // a, `a b`, e.a; not a struct's field, s.a: an expression
          dotted(expression, 0) == expression.size()
              ? column(names(sql, expression, 0, expression.size()), qualifier)
              : null;
      String computed = null;
      if (eventTime == null) {
        computed = sql.substring(expression.get(0).start, tokens.get(end - 1).end);
        eventTime = COMPUTED;
      }
      // The keys of OVER: column names, separated by commas.
      List<String> keys = new ArrayList<>();
      int next = end;
      if (next < tokens.size() && tokens.get(next).is("OVER")) {
        do {
          int after = dotted(tokens, next + 1);
          if (after == next + 1) {
            Token near = tokens.get(Math.min(next + 1, tokens.size() - 1));
            throw error("OVER names no key column", sql, near);
          }
          String key = column(names(sql, tokens, next + 1, after), qualifier);
          if (key == null) {
            throw error("OVER takes the input's columns, not a struct's field (select it into a"
                + " column first)", sql, tokens.get(next + 1));
          }
          keys.add(key);
          next = after;
        } while (next + 1 < tokens.size() && tokens.get(next).is(","));
      }
      return new Clause(
          relation.get(0).start,
          tokens.get(next - 1).end,
          next,
          relationText,
          !stream && !subquery,
          given,
          given != null ? given : named,
          eventTime,
          computed,
          keys);
    }

    /** The policy's name: the input's alias, or its table's name (null: neither). */
    String policyName() {
      return alias == null ? null : alias.replace("`", "").replaceAll("[^A-Za-z0-9_.-]", "_");
    }

    /** The call that stands for the clause. */
    String call() {
      StringBuilder call = new StringBuilder(PolicyTable.NAME).append("(TABLE(");
      if (plainName && computed == null) {
        call.append(relation);
      } else {
        call.append("SELECT *");
        if (computed != null) {
          call.append(", ").append(computed).append(" AS ").append(COMPUTED);
        }
        call.append(" FROM ").append(relation);
        if (givenAlias != null) {
          call.append(" AS ").append(givenAlias);
        }
      }
      call.append("), event_time => ").append(literal(eventTime));
      if (!keys.isEmpty()) {
        call.append(", substream_by => ").append(literal(String.join(", ", keys)));
      }
      if (alias != null) { // the input's name names the policy: one per input of a query
        call.append(", name => ").append(literal(policyName()));
      }
      call.append(")");
      return alias == null ? call.toString() : call.append(" AS ").append(alias).toString();
    }
  }

  /** Where {@code name(.name)*} from {@code at} ends ({@code at}: none there). */
  private static int dotted(List<Token> tokens, int at) {
    if (at >= tokens.size() || !tokens.get(at).word()) {
      return at;
    }
    int i = at + 1;
    while (i + 1 < tokens.size() && tokens.get(i).is(".") && tokens.get(i + 1).word()) {
      i += 2;
    }
    return i;
  }

  /** The names of {@code name(.name)*} from {@code from} to {@code to}, without backquotes. */
  private static List<String> names(String sql, List<Token> tokens, int from, int to) {
    List<String> names = new ArrayList<>();
    for (int i = from; i < to; i += 2) {
      names.add(tokens.get(i).name(sql));
    }
    return names;
  }

  /**
   * The input's column that {@code name(.name)*} names: its last name, where the names before
   * it qualify it by the input ({@code qualifier}: its alias, or its table's name, of which a
   * tail will do: {@code events.t}, {@code db.events.t}); null where they do not ({@code
   * payload.t}: a struct's field).
   */
  static String column(List<String> names, List<String> qualifier) {
    int prefix = names.size() - 1;
    if (prefix > qualifier.size()) {
      return null;
    }
    for (int i = 0; i < prefix; i++) {
      String given = names.get(i);
      String expected = qualifier.get(qualifier.size() - prefix + i);
      if (!given.equalsIgnoreCase(expected)) {
        return null;
      }
    }
    return names.get(prefix);
  }

  /** The index of the {@code )} that closes the {@code (} at {@code open}. */
  private static int closing(List<Token> tokens, int open) {
    int depth = 0;
    for (int i = open; i < tokens.size(); i++) {
      depth += tokens.get(i).is("(") ? 1 : tokens.get(i).is(")") ? -1 : 0;
      if (depth == 0) {
        return i;
      }
    }
    return tokens.size() - 1;
  }

  /** A SQL string literal of {@code value}. */
  static String literal(String value) {
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'";
  }

  /** A token of SQL text: a word, a quoted name, a string, a number or a symbol. */
  record Token(int start, int end, char kind, String upper) {
    static final char WORD = 'w';
    static final char QUOTED = 'q';
    static final char OTHER = 'o';

    boolean is(String text) {
      return kind != QUOTED && text.equals(upper);
    }

    boolean word() {
      return kind == WORD || kind == QUOTED;
    }

    boolean clause() {
      return kind == WORD && CLAUSES.contains(upper);
    }

    String text(String sql) {
      return sql.substring(start, end);
    }

    /** A word as a column name: a quoted one without its backquotes. */
    String name(String sql) {
      String text = text(sql);
      return kind == QUOTED ? text.substring(1, text.length() - 1).replace("``", "`") : text;
    }

    /** The tokens of {@code sql}, without spaces and comments. */
    static List<Token> read(String sql) {
      List<Token> tokens = new ArrayList<>();
      int n = sql.length();
      int i = 0;
      while (i < n) {
        char c = sql.charAt(i);
        int start = i;
        if (Character.isWhitespace(c)) {
          i++;
          continue;
        }
        if (c == '-' && i + 1 < n && sql.charAt(i + 1) == '-') {
          while (i < n && sql.charAt(i) != '\n') {
            i++;
          }
          continue;
        }
        if (c == '/' && i + 1 < n && sql.charAt(i + 1) == '*') {
          int depth = 0;
          do { // Spark's comments nest
            if (sql.startsWith("/*", i)) {
              depth++;
              i += 2;
            } else if (sql.startsWith("*/", i)) {
              depth--;
              i += 2;
            } else {
              i++;
            }
          } while (depth > 0 && i < n);
          continue;
        }
        char kind = Token.OTHER;
        if (c == '\'' || c == '"' || c == '`') {
          i++;
          while (i < n && (sql.charAt(i) != c || c == '`' && sql.startsWith("``", i))) {
            i += sql.charAt(i) == (c == '`' ? '`' : '\\') ? 2 : 1; // `` in a name, \x in a string
          } // `a``b``c`: one name
          i++;
          kind = c == '`' ? Token.QUOTED : Token.OTHER;
        } else if (Character.isLetterOrDigit(c) || c == '_') {
          while (i < n && (Character.isLetterOrDigit(sql.charAt(i)) || sql.charAt(i) == '_')) {
            i++;
          }
          // 2024_events is a name, as in Spark; 42, 42L, 1E3 and 2BD are numbers
          kind = NUMBER.matcher(sql.substring(start, i)).matches() ? Token.OTHER : Token.WORD;
        } else {
          i++;
        }
        i = Math.min(i, n);
        tokens.add(new Token(start, i, kind, sql.substring(start, i).toUpperCase(Locale.ROOT)));
      }
      return tokens;
    }
  }
}
