package io.wmobs.spark;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.IOException;
import java.io.Serializable;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.mapreduce.Job;
import org.apache.parquet.hadoop.ParquetFileWriter;
import org.apache.parquet.hadoop.ParquetOutputFormat;
import org.apache.parquet.hadoop.ParquetWriter;
import org.apache.parquet.hadoop.api.WriteSupport;
import org.apache.parquet.io.OutputFile;
import org.apache.spark.TaskContext;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.expressions.JoinedRow;
import org.apache.spark.sql.catalyst.expressions.codegen.CodeBlock;
import org.apache.spark.sql.catalyst.expressions.codegen.CodegenContext;
import org.apache.spark.sql.catalyst.expressions.codegen.ExprCode;
import org.apache.spark.sql.catalyst.expressions.codegen.JavaCode;
import org.apache.spark.sql.execution.datasources.parquet.ParquetFileFormat;
import org.apache.spark.sql.execution.datasources.parquet.ParquetWriteSupport;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;
import org.apache.spark.util.SerializableConfiguration;
import org.apache.spark.util.TaskCompletionListener;

/**
 * Dead letters written from the JVM: {@code wmobs_dead_letters(spec, row, verdict)}, of one
 * struct (a dropped row's input columns, under their names) and its verdict bits, false. The
 * time policy calls it only for the rows it drops, in a {@code CASE} branch of its filter, so
 * kept rows never leave the stage's generated code (nor does a dropped one: the struct is
 * Spark's binary row). Each task appends its dropped rows to one Parquet file (in memory, a
 * large one in the executor's local directories: {@link SpoolFile}) and, when the task
 * succeeds, writes it whole to {@code <directory>/batch_id=<N>/part-<partition>-<policy>-<query
 * id>.parquet} ({@link #fileName}) with the session's Hadoop configuration (the one Spark
 * writes the checkpoint with): one object on an object store, a temporary file and a rename
 * elsewhere, as {@code Storage.write_once} does in Python. A retried task writes the
 * same file again; a task that fails writes nothing, and one that cannot write fails (its
 * {@code observe} counts are discarded with it).
 *
 * <p>The rows are written by Spark's own Parquet writer ({@link ParquetWriteSupport}, set up
 * on the driver by {@link ParquetFileFormat#prepareWrite} with the session's Parquet settings:
 * timestamp type, legacy format, field ids, compression, calendar rebase), so every type Spark
 * writes to Parquet is written here as Spark would write it, nested ones included, and
 * {@code spark.read.parquet} reads the input's schema back, plus {@code wmobs_rule}, {@code
 * wmobs_policy} and {@code wmobs_batch_id}.
 */
public final class DeadLetterWriter implements Serializable {
  private static final long serialVersionUID = 1L;
  /** (task attempt, spec) -> the file it is writing: one per policy in a task. */
  private static final Map<List<Object>, TaskFile> OPEN = new ConcurrentHashMap<>();
  static final Set<String> MEMBERS = Set.of("directory", "rules", "policy");
  /** Members a spec may have beyond those: the arguments' names of a call by name. */
  static final Set<String> OPTIONAL = Set.of("columns");
  /** The columns appended to the dropped rows' own. */
  static final String RULE = "wmobs_rule";
  static final String POLICY = "wmobs_policy";
  static final String BATCH = "wmobs_batch_id";

  private final String directory;
  private final String[] ruleNames;
  private final long[] ruleBits;
  private final String policy;
  private final String spec;
  /** The session's Hadoop configuration with its Parquet settings, as Spark's writer reads it. */
  private final Broadcast<SerializableConfiguration> conf;
  /** The micro-batch it was planned for, or null: the task's own local properties. */
  private final MicroBatch told;

  DeadLetterWriter(JsonNode spec, Broadcast<SerializableConfiguration> conf) {
    Spec.members("wmobs_dead_letters", spec, MEMBERS, OPTIONAL);
    // Built on the driver: a relative directory as Spark resolves the query's checkpoint.
    Spec.Reader read = new Spec.Reader("wmobs_dead_letters", spec);
    directory = Hadoop.qualified(read.text("directory").replaceAll("/+$", ""));
    List<JsonNode> rules = read.tuples("rules", "si");
    ruleNames = new String[rules.size()];
    ruleBits = new long[rules.size()];
    for (int i = 0; i < rules.size(); i++) {
      ruleNames[i] = rules.get(i).get(0).textValue();
      ruleBits[i] = rules.get(i).get(1).longValue();
    }
    policy = read.text("policy");
    this.spec = spec.toString();
    this.conf = conf;
    this.told = null;
  }

  private DeadLetterWriter(DeadLetterWriter writer, MicroBatch told) {
    directory = writer.directory;
    ruleNames = writer.ruleNames;
    ruleBits = writer.ruleBits;
    policy = writer.policy;
    spec = writer.spec;
    conf = writer.conf;
    this.told = told;
  }

  /**
   * The function {@code name}, built from its arguments: the spec (JSON with {@code
   * directory}, {@code rules} ({@code [[name, bit]]}: a row's rule is the first whose bit its
   * verdict has) and {@code policy} (the time policy's name)), the row's struct and its verdict
   * (a long). Fails on the driver, naming the cause, where a column is of a type Spark's
   * Parquet writer cannot write, or Hadoop cannot reach and write the directory.
   */
  static Expression build(String name, List<Expression> arguments) {
    Spec.arity(name, arguments, 3);
    JsonNode spec = Spec.json(name, arguments);
    Expression row = Spec.rest(arguments).get(0);
    Expression verdict = Spec.rest(arguments).get(1);
    if (!(row.dataType() instanceof StructType struct)
        || !verdict.dataType().equals(DataTypes.LongType)) {
      throw new IllegalArgumentException(
          "wmobs: " + name + " takes a struct of the dropped rows' columns and a long verdict, not "
              + row.dataType().simpleString() + " and " + verdict.dataType().simpleString());
    }
    StructType written = written(struct);
    SparkSession spark = SparkSession.active();
    Configuration conf = parquetConf(spark, written);
    Broadcast<SerializableConfiguration> shared =
        JavaSparkContext.fromSparkContext(spark.sparkContext())
            .broadcast(new SerializableConfiguration(conf));
    DeadLetterWriter writer = new DeadLetterWriter(spec, shared);
    reachable(writer.directory, conf);
    return new Write(writer, name, row, verdict);
  }

  /**
   * What a dead-letter file holds: the dropped rows' columns, then the rule, the policy and
   * the batch. A column Spark's Parquet writer cannot write (an interval of months and days, a
   * null type) is an error naming it, as {@code df.write.parquet} would raise.
   */
  static StructType written(StructType columns) {
    ParquetFileFormat parquet = new ParquetFileFormat();
    List<String> refused = new ArrayList<>();
    for (StructField field : columns.fields()) {
      if (!parquet.supportDataType(field.dataType())) {
        refused.add("`" + field.name() + "` (" + field.dataType().simpleString() + ")");
      }
    }
    if (!refused.isEmpty()) {
      throw new IllegalArgumentException(
          "wmobs: dead_letter: Spark's Parquet writer cannot write the column(s) "
              + String.join(", ", refused)
              + "; cast or drop them before the policy, or give format=\"json\" or a function");
    }
    return columns
        .add(RULE, DataTypes.StringType)
        .add(POLICY, DataTypes.StringType)
        .add(BATCH, DataTypes.LongType);
  }

  /**
   * The session's Hadoop configuration with everything Spark's Parquet writer reads from it,
   * set by Spark itself as for {@code df.write.parquet} ({@code spark.sql.parquet.*}, the
   * compression codec, the row schema {@code written}).
   */
  static Configuration parquetConf(SparkSession spark, StructType written) {
    try {
      Job job = Job.getInstance(spark.sessionState().newHadoopConf());
      new ParquetFileFormat()
          .prepareWrite(spark, job, scala.collection.immutable.Map$.MODULE$.empty(), written);
      return job.getConfiguration();
    } catch (IOException e) {
      throw new java.io.UncheckedIOException(e);
    }
  }

  /**
   * On the driver, when the policy is applied: Hadoop reaches {@code directory} with the
   * session's configuration (a filesystem for its scheme; on an object store, its bucket with
   * the credentials found), else an error naming the directory and Hadoop's cause, as the
   * Python engine's {@code Storage.check_writable} does; and that a file can be written there
   * (one empty file, written and deleted). Otherwise the first dropped row, maybe days later,
   * would fail its micro-batch.
   */
  static void reachable(String directory, Configuration conf) {
    Path path = new Path(directory);
    FileSystem fs;
    try {
      fs = path.getFileSystem(conf);
    } catch (IOException | RuntimeException e) { // no connector: ClassNotFoundException inside
      throw new IllegalArgumentException(
          "wmobs: no Hadoop filesystem for the dead letters' directory " + directory + ": " + e,
          e);
    }
    boolean existed;
    try {
      existed = fs.exists(path);
    } catch (IOException | RuntimeException e) {
      throw new IllegalArgumentException(
          "wmobs: cannot reach the dead letters' directory " + directory + " (" + e
              + "); check the bucket and the credentials in the session's Hadoop configuration",
          e);
    }
    // Created and written to now, once (an empty file, deleted, and the directory if it was
    // not there): a directory that cannot be is an error naming it here, not a failed
    // micro-batch at the first dropped row.
    Path probe = new Path(path, ".wmobs-probe-" + java.util.UUID.randomUUID());
    try {
      Hadoop.writeOnce(probe, new byte[0], conf);
      Hadoop.delete(probe, conf);
      if (!existed) {
        Hadoop.deleteEmptyFolder(path, conf); // an object store's marker for it too
      }
    } catch (IOException | RuntimeException e) {
      throw new IllegalArgumentException(
          "wmobs: cannot write to the dead letters' directory " + directory + " (" + e + ")", e);
    }
  }

  /** Appends the dropped row to its task's file; false (the row is not kept). */
  public boolean write(InternalRow row, long verdict) throws IOException {
    TaskContext task = TaskContext.get();
    if (task == null) {
      throw new IllegalStateException("wmobs: dead letters are written inside Spark tasks");
    }
    List<Object> key = List.of(task.taskAttemptId(), spec);
    TaskFile file = OPEN.get(key);
    if (file == null) {
      file = new TaskFile(MicroBatch.of(told, task), conf.value().value());
      OPEN.put(key, file);
      task.addTaskCompletionListener(
          new TaskCompletionListener() {
            @Override
            public void onTaskCompletion(TaskContext context) {
              finish(context);
            }
          });
    }
    UTF8String rule = null;
    for (int r = 0; r < ruleBits.length; r++) {
      if ((verdict & ruleBits[r]) != 0) {
        rule = UTF8String.fromString(ruleNames[r]);
        break;
      }
    }
    file.append(row, rule);
    return false;
  }

  private void finish(TaskContext task) {
    TaskFile file = OPEN.remove(List.of(task.taskAttemptId(), spec));
    if (file == null) {
      return;
    }
    try (SpoolFile spool = file.spool) {
      file.writer.close();
      if (!task.isFailed() && !task.isInterrupted()) {
        Path target =
            new Path(
                directory + "/batch_id=" + file.batchId + "/"
                    + fileName(task.partitionId(), file.query, policy));
        Hadoop.writeOnce(target, spool::writeTo, conf.value().value());
      }
    } catch (IOException e) {
      throw new IllegalStateException(
          "wmobs: could not write the dead letters of batch " + file.batchId + " to "
              + directory + ": " + e,
          e);
    }
  }

  /**
   * The task's file in its batch's folder: {@code part-<partition>-<policy>-<query id>.parquet}.
   * Two policies or queries writing to one directory (or one query started again on a new
   * checkpoint, a new id) write files of their own; a task that runs again writes its own file
   * again. {@code deadletter.file_name} names the same.
   */
  static String fileName(int partition, String query, String policy) {
    String writer = query == null ? policy : policy + "-" + query;
    return String.format("part-%05d-%s.parquet", partition, writer);
  }

  /**
   * One task's file: Parquet, by Spark's writer, kept until the task completes (in memory, a
   * large one in a local file: {@link SpoolFile}).
   */
  private final class TaskFile {
    final long batchId;
    /** The query whose micro-batch it is, or null. */
    final String query;
    final SpoolFile spool = new SpoolFile(SpoolFile.IN_MEMORY);
    final ParquetWriter<InternalRow> writer;
    /** The appended columns of the row being written (rule, policy, batch). */
    private final GenericInternalRow appended;
    private final JoinedRow joined = new JoinedRow();

    TaskFile(java.util.function.UnaryOperator<String> property, Configuration conf)
        throws IOException {
      String batch = property.apply(MicroBatch.BATCH_ID);
      if (batch == null) { // its file would be another task's, under batch_id=-1
        throw new IllegalStateException(
            "wmobs: a policy's dead letters were written in a task that Spark ran without its"
                + " streaming micro-batch (its plan was not planned by a streaming query with"
                + " wmobs' extension in the session), so where they belong is not known");
      }
      batchId = Long.parseLong(batch);
      query = property.apply(MicroBatch.QUERY_ID);
      appended = new GenericInternalRow(new Object[] {null, UTF8String.fromString(policy), batchId});
      writer =
          new Builder(spool)
              .withConf(conf)
              .withCompressionCodec(ParquetOutputFormat.getCompression(conf))
              .withRowGroupSize(ParquetOutputFormat.getLongBlockSize(conf))
              .withWriteMode(ParquetFileWriter.Mode.OVERWRITE)
              .build();
    }

    void append(InternalRow row, UTF8String rule) throws IOException {
      appended.update(0, rule);
      writer.write(joined.apply(row, appended));
    }
  }

  /** A Parquet writer of {@link InternalRow}s with Spark's write support. */
  private static final class Builder extends ParquetWriter.Builder<InternalRow, Builder> {
    Builder(OutputFile file) {
      super(file);
    }

    @Override
    protected Builder self() {
      return this;
    }

    @Override
    protected WriteSupport<InternalRow> getWriteSupport(Configuration configuration) {
      return new ParquetWriteSupport();
    }
  }

  /**
   * The function as Spark evaluates it: in generated code, a call of {@link #write} on the
   * row's struct (a binary row, read in place).
   */
  public static final class Write extends WmobsExpression
      implements Serializable, MicroBatch.Told {
    private static final long serialVersionUID = 1L;
    private final DeadLetterWriter writer;
    private final String name;
    private final Expression row;
    private final Expression verdict;

    Write(DeadLetterWriter writer, String name, Expression row, Expression verdict) {
      this.writer = writer;
      this.name = name;
      this.row = row;
      this.verdict = verdict;
    }

    @Override
    public Object eval(InternalRow input) {
      Object value = row.eval(input);
      Object bits = verdict.eval(input);
      if (value == null || bits == null) {
        return null;
      }
      try {
        return writer.write((InternalRow) value, (Long) bits);
      } catch (IOException e) {
        throw new java.io.UncheckedIOException(e);
      }
    }

    @Override
    public ExprCode doGenCode(CodegenContext ctx, ExprCode ev) {
      String reference =
          ctx.addReferenceObj("wmobsDeadLetters", writer, DeadLetterWriter.class.getName());
      ExprCode child = row.genCode(ctx);
      ExprCode bits = verdict.genCode(ctx);
      String isNull = ctx.freshName("wmobsIsNull");
      String value = ctx.freshName("wmobsWritten");
      String code =
          child.code()
              + "\n" + bits.code()
              + "\nboolean " + isNull + " = " + child.isNull() + " || " + bits.isNull() + ";\n"
              + "boolean " + value + " = false;\n"
              + "if (!" + isNull + ") {\n"
              + "  try {\n"
              + "    " + value + " = " + reference + ".write(" + child.value() + ", "
              + bits.value() + ");\n"
              + "  } catch (java.io.IOException e) {\n"
              + "    throw new java.io.UncheckedIOException(e);\n"
              + "  }\n"
              + "}";
      return ExprCode.apply(
          new CodeBlock(Scala.seq(List.of(code)), Scala.seq(List.<JavaCode>of())),
          JavaCode.isNullVariable(isNull),
          JavaCode.variable(value, DataTypes.BooleanType));
    }

    @Override
    protected List<Expression> arguments() {
      return List.of(row, verdict);
    }

    @Override
    protected Expression withArguments(List<Expression> arguments) {
      return new Write(writer, name, arguments.get(0), arguments.get(1));
    }

    @Override
    public Expression told(MicroBatch batch) {
      if (batch.equals(writer.told)) {
        return this;
      }
      return new Write(new DeadLetterWriter(writer, batch), name, row, verdict);
    }

    @Override
    protected List<Object> fields() {
      return List.of(writer, name, row, verdict);
    }

    @Override
    public boolean deterministic() {
      return false; // it writes
    }

    @Override
    public boolean nullable() {
      return true;
    }

    @Override
    public DataType dataType() {
      return DataTypes.BooleanType;
    }

    @Override
    public String prettyName() {
      return name;
    }
  }
}
