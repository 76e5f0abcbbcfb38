#ifndef BOARDBUS_ACCEPT_GUARD_H
#define BOARDBUS_ACCEPT_GUARD_H

/* The accept guard of the motherboard process: see accept_guard.c. */

/* From now on, a connection accepted on a descriptor numbered `ceiling` or above is closed at
   once (the descriptors above are kept for the process's own work), and one that cannot be
   accepted for lack of descriptors is taken off its listener's queue and closed. 0: no ceiling. */
void boardbus_accept_guard_start(int ceiling);

/* Connections the guard closed so far. */
long boardbus_accept_guard_refused(void);

#endif
