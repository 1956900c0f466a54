package io.wmobs.spark;

import java.util.Iterator;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Generator;
import org.apache.spark.sql.catalyst.expressions.codegen.CodegenContext;
import org.apache.spark.sql.catalyst.expressions.codegen.ExprCode;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import scala.Enumeration;
import @scala.seq@;

/**
 * {@link WmobsExpression} for a generator that runs without generated code: {@link #rows} for
 * each input row, {@link #finish} when the partition ends, as Java iterators. What Scala's
 * {@code Generator} trait needs of a Java class (its initializer, its one field) is here.
 * (A template: Maven fills in the Scala version's collection types, see the pom.)
 */
public abstract class WmobsGenerator extends WmobsExpression implements Generator {
  private static final long serialVersionUID = 1L;
  private Seq<Enumeration.Value> nodePatterns;

  protected WmobsGenerator() {
    Generator.$init$(this);
  }

  /** The rows to yield for {@code row}. */
  protected abstract Iterator<InternalRow> rows(InternalRow row);

  /** The rows to yield when the partition ends. */
  protected abstract Iterator<InternalRow> finish();

  @Override
  public final @scala.once@<InternalRow> eval(InternalRow row) {
    return Scala.once(rows(row));
  }

  @Override
  public final @scala.once@<InternalRow> terminate() {
    return Scala.once(finish());
  }

  @Override
  public final boolean supportCodegen() {
    return false;
  }

  @Override
  public final ExprCode doGenCode(CodegenContext ctx, ExprCode ev) {
    throw new UnsupportedOperationException("wmobs: " + prettyName() + " runs without generated code");
  }

  @Override
  public final DataType dataType() {
    return DataTypes.createArrayType(elementSchema());
  }

  @Override
  public boolean nullable() {
    return false;
  }

  @Override
  public final Seq<Enumeration.Value> nodePatterns() {
    return nodePatterns;
  }

  @Override
  public final void org$apache$spark$sql$catalyst$expressions$Generator$_setter_$nodePatterns_$eq(
      Seq<Enumeration.Value> patterns) {
    nodePatterns = patterns;
  }
}
