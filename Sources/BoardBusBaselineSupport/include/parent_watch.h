// What the C baseline's two processes share.
#ifndef BASELINE_PARENT_WATCH_H
#define BASELINE_PARENT_WATCH_H

// Exits the process (status 0) once its parent is gone, looking five times a second from a
// thread of its own: the baseline's processes go with the benchmark that started them, even
// when it is interrupted (Ctrl-C) before it could stop them.
void exit_with_parent(void);

#endif
