#!/usr/bin/env python3
"""How fast this machine populates fresh anonymous memory: madvise(MADV_POPULATE_WRITE) against
memset's page faults, memset on mapped memory, the advice again on mapped memory, and mincore of
mapped memory in 1 MiB calls (the populate step's check). Three repeats.

    populate_rate.py [MiB, default 512]
"""
import ctypes
import sys
import time

libc = ctypes.CDLL(None, use_errno=True)
libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                      ctypes.c_long]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
PROT_RW, MAP_PRIVATE_ANONYMOUS, MADV_POPULATE_WRITE, MIB = 3, 0x22, 23, 1 << 20


def timed(f):
    start = time.perf_counter()
    f()
    return time.perf_counter() - start


n = (int(sys.argv[1]) if len(sys.argv) > 1 else 512) * MIB
vector = ctypes.create_string_buffer(256)
for _ in range(3):
    p = libc.mmap(None, n, PROT_RW, MAP_PRIVATE_ANONYMOUS, -1, 0)
    t = timed(lambda: libc.madvise(p, n, MADV_POPULATE_WRITE))
    print(f"MADV_POPULATE_WRITE {n // MIB} MiB fresh: {t * 1e3:.1f} ms, {n / t / 1e9:.2f} GB/s")
    libc.munmap(p, n)
    p = libc.mmap(None, n, PROT_RW, MAP_PRIVATE_ANONYMOUS, -1, 0)
    t = timed(lambda: ctypes.memset(p, 1, n))
    print(f"memset {n // MIB} MiB fresh (a fault per page): {t * 1e3:.1f} ms, {n / t / 1e9:.2f} GB/s")
    t = timed(lambda: ctypes.memset(p, 2, n))
    print(f"memset {n // MIB} MiB mapped: {t * 1e3:.1f} ms, {n / t / 1e9:.2f} GB/s")
    t = timed(lambda: libc.madvise(p, n, MADV_POPULATE_WRITE))
    print(f"MADV_POPULATE_WRITE {n // MIB} MiB mapped: {t * 1e3:.2f} ms")
    t = timed(lambda: [libc.mincore(p + c * MIB, MIB, vector) for c in range(n // MIB)])
    print(f"mincore {n // MIB} MiB mapped, 1 MiB a call: {t * 1e3:.2f} ms")
    libc.munmap(p, n)
