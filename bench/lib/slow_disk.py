"""A slower disk for a benchmark's nodes: every fsync/fdatasync of the process returns
`delay_us` later (an LD_PRELOAD library, compiled here with the machine's C compiler).

This machine's disk answers an fdatasync in about 0.1 ms; a cloud volume takes 0.5-2 ms and
a spinning disk 5-10 ms. Work that waits on the log's fsync shows only on such a disk, so
`--sync-delay-us` runs both sides of an A/B on the same simulated one. The delay is added
after the real call returns (the data is as durable as before) and sleeps in C, outside
the interpreter's lock, as a real device's wait does.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

DELAY_ENV = "TSCHED_BENCH_SYNC_DELAY_US"
_SOURCE = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <time.h>

static void wait_more(void) {
    const char *s = getenv("%s");
    long us = s ? atol(s) : 0;
    if (us > 0) {
        struct timespec ts = {us / 1000000, (us %% 1000000) * 1000};
        nanosleep(&ts, NULL);
    }
}

/* fsync and fdatasync alike: the real call, then the wait */
#define SLOWER(name) \
    int name(int fd) { \
        static int (*real)(int); \
        if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, #name); \
        int rc = real(fd); \
        wait_more(); \
        return rc; \
    }

SLOWER(fsync)
SLOWER(fdatasync)
""" % DELAY_ENV


def slow_disk_env(delay_us: int, workdir: str | None = None) -> dict[str, str]:
    """Environment for a node process whose syncs take `delay_us` longer ({} for 0)."""
    if delay_us <= 0:
        return {}
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if cc is None:
        raise SystemExit("--sync-delay-us needs a C compiler (cc or gcc) on PATH")
    where = workdir or tempfile.mkdtemp(prefix="tsched-slow-disk-")
    src, lib = os.path.join(where, "slow_sync.c"), os.path.join(where, "slow_sync.so")
    with open(src, "w") as f:
        f.write(_SOURCE)
    subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", lib, src, "-ldl"], check=True)
    return {"LD_PRELOAD": lib, DELAY_ENV: str(delay_us)}
