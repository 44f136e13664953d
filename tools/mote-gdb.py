# mote-gdb.py - gdb commands to look at mote's tasks in a stopped program.
#
#   (gdb) source tools/mote-gdb.py
#   (gdb) mote-tasks          every started task: id, name, worker, what it waits on
#   (gdb) mote-bt ID          the backtrace of a parked task, from its saved context
#
# Reads the scheduler's own state (`mote__rt`, src/runtime.h), so it needs
# mote's debug information (the library is always built with -g). Parked
# tasks are walked by their frame-pointer chain, bounded to their own stack,
# without touching the process's registers.  A frozen task's stack pages
# are not there (gdb's reads of them fail: ptrace does not wait for the
# thaw), so its words are read from its image (src/freeze.h) instead.
import gdb


def _rt():
    return gdb.parse_and_eval("mote__rt")


def _entry(node, typename, member):
    """The struct holding a list node (list.h's list_entry)."""
    t = gdb.lookup_type(typename)
    off = next(f.bitpos for f in t.fields() if f.name == member) // 8
    addr = int(node.cast(gdb.lookup_type("unsigned long"))) - off
    return gdb.Value(addr).cast(t.pointer())


def _tasks():
    rt = _rt()
    ws = rt["w"]
    if int(ws) == 0:
        return
    for i in range(int(rt["nworkers"])):
        n = ws[i]["all"]["head"]
        while int(n) != 0:
            yield i, ws[i], _entry(n, "struct task", "all_link")
            n = n["next"]


def _symbol(addr):
    block = gdb.block_for_pc(addr)
    while block is not None and block.function is None:
        block = block.superblock
    if block is not None and block.function is not None:
        return str(block.function.print_name)
    return "0x%x" % addr


def _name(t):
    if int(t["name"]) != 0:
        return t["name"].string()
    return _symbol(int(t["fn"]))


FZ_STATE, FZ_FROZEN, FZ_DEEP = 3, 2, 16


def _frozen(t):
    return (int(t["fz"]) & FZ_STATE) == FZ_FROZEN


def _reader(t, top):
    """A function reading the 8-byte word at an address of t's stack."""
    ulong = gdb.lookup_type("unsigned long").pointer()
    if not _frozen(t):
        return lambda addr: int(gdb.Value(addr).cast(ulong)[0])
    img = t["fz_img"]
    n = int(img["len"])
    base = int(img["bytes"].address.cast(gdb.lookup_type("unsigned long")))
    sp = top - n

    def read(addr):
        if addr < sp or addr + 8 > top:
            raise gdb.MemoryError("below the frozen image")
        return int(gdb.Value(base + (addr - sp)).cast(ulong)[0])

    return read


def _stack_bounds(t):
    word = int(t["stack"]["word"])
    top = word & ~0xFFF
    cls = word & 0xFFF
    return top - (8192 << cls), top


class MoteTasks(gdb.Command):
    """List mote's started tasks: id, name, worker and what each waits on."""

    def __init__(self):
        super().__init__("mote-tasks", gdb.COMMAND_USER)

    def invoke(self, arg, from_tty):
        n = 0
        for i, w, t in _tasks():
            running = int(w["current"]) == int(t)
            why = t["wait_why"].string() if int(t["wait_why"]) != 0 else "runnable"
            state = "running" if running else why
            if _frozen(t):
                state += ", stack frozen" + (" (deep)" if int(t["fz"]) & FZ_DEEP else "")
            gdb.write("task %d (%s) on worker %d: %s\n" % (int(t["id"]), _name(t), i, state))
            n += 1
        gdb.write("%d tasks\n" % n)


class MoteBacktrace(gdb.Command):
    """Print the backtrace of the parked mote task with the given id."""

    def __init__(self):
        super().__init__("mote-bt", gdb.COMMAND_USER)

    def invoke(self, arg, from_tty):
        want = int(gdb.parse_and_eval(arg))
        for i, w, t in _tasks():
            if int(t["id"]) != want:
                continue
            if int(w["current"]) == int(t):
                gdb.write("task %d is running: use bt in its thread\n" % want)
                return
            lo, hi = _stack_bounds(t)
            word = _reader(t, hi)
            sp = int(t["ctx"]["sp"].cast(gdb.lookup_type("unsigned long")))
            fp, ret = word(sp + 48), word(sp + 56)  # saved rbp, return address
            depth = 0
            while ret and depth < 64:
                gdb.write("#%-2d 0x%016x in %s\n" % (depth, ret, _symbol(ret - 1)))
                depth += 1
                if fp < lo or fp + 16 > hi or fp & 7:
                    break
                try:
                    nxt, ret = word(fp), word(fp + 8)
                except gdb.MemoryError:
                    break
                if nxt <= fp:
                    break
                fp = nxt
            return
        gdb.write("no started task with id %d\n" % want)


MoteTasks()
MoteBacktrace()
