package io.wmobs.spark;

import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Set;

/** Sets that remember what was added last, and no more: a driver or an executor may run for months. */
final class Recent {
  private Recent() {}

  /** A thread-safe set of the {@code size} elements added last. */
  static <T> Set<T> set(int size) {
    return Collections.newSetFromMap(
        Collections.synchronizedMap(
            new LinkedHashMap<T, Boolean>() {
              private static final long serialVersionUID = 1L;

              @Override
              protected boolean removeEldestEntry(Map.Entry<T, Boolean> eldest) {
                return size() > size;
              }
            }));
  }
}
