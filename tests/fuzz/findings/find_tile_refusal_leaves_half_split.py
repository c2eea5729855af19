# Found by tests/fuzz (shrunk).  tile(x, y, fx, fy) splits x, then y; when the split of y
# is refused (here: y is tensorized; or y_factor=0), the ScheduleError is raised AFTER x has
# already been split -- a refused primitive leaves the schedule changed (x is now
# x.outer/x.inner, the trace has no step for it, so a trace replay gives another schedule).
# Related to r09 (a refusal after mutation) but another primitive and another check.
import tdsl as td

A = td.placeholder((6, 8), name="A")
B = td.compute((6, 8), lambda i, j: A[i, j] * 2.0, name="B")
for label, yf in [("y_factor=0", 0), ("y_factor=td.var", td.var("f"))]:
    s = td.create_schedule(B.op)
    i, j = B.op.axis
    before = [v.name for v in s[B].leaf_iter_vars]
    try:
        s[B].tile(i, j, 2, yf)
        print(label, "accepted")
    except Exception as e:
        print(label, "refused:", type(e).__name__, e)
    after = [v.name for v in s[B].leaf_iter_vars]
    print("  leaf loops before:", before, "after:", after, "trace steps:", len(s.trace),
          "-> UNCHANGED" if before == after else "-> CHANGED by a refused call")
