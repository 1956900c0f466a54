package io.wmobs.spark;

import java.util.List;
import org.apache.spark.sql.catalyst.expressions.Expression;
import @scala.indexedSeq@;
import @scala.seq@;

/**
 * What every wmobs Catalyst expression has in common: its children and the fields that
 * Catalyst's tree code reads (as a Scala case class would give them), from two Java lists.
 * Subclasses say what they are in {@link #arguments}, {@link #withArguments} and {@link
 * #fields}; this class speaks Scala's collections. (A template: Maven fills in the Scala
 * version's collection types, see the pom.)
 */
public abstract class WmobsExpression extends Expression {
  private static final long serialVersionUID = 1L;
  private transient Seq<Expression> children;

  /** The children, in order. */
  protected abstract List<Expression> arguments();

  /** The same expression over other children. */
  protected abstract Expression withArguments(List<Expression> arguments);

  /** The fields that identify it, children included (Catalyst's {@code productElement}s). */
  protected abstract List<Object> fields();

  @Override
  public final Seq<Expression> children() {
    if (children == null) {
      children = Scala.seq(arguments());
    }
    return children;
  }

  @Override
  public final Expression withNewChildrenInternal(IndexedSeq<Expression> newChildren) {
    return withArguments(Scala.list(newChildren));
  }

  @Override
  public final int productArity() {
    return fields().size();
  }

  @Override
  public final Object productElement(int n) {
    return fields().get(n);
  }

  @Override
  public final boolean canEqual(Object other) {
    return other != null && other.getClass() == getClass();
  }
}
