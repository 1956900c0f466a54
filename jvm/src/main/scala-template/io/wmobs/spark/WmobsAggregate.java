package io.wmobs.spark;

import java.util.List;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.aggregate.TypedImperativeAggregate;
import @scala.indexedSeq@;
import @scala.seq@;

/**
 * {@link WmobsExpression} for an aggregate whose state is a Java object {@code T}: children
 * and fields from Java lists. (A template: Maven fills in the Scala version's collection
 * types, see the pom.)
 */
public abstract class WmobsAggregate<T> extends TypedImperativeAggregate<T> {
  private static final long serialVersionUID = 1L;
  private transient Seq<Expression> children;

  protected abstract List<Expression> arguments();

  protected abstract Expression withArguments(List<Expression> arguments);

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
