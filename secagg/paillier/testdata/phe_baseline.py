#!/usr/bin/env python3
"""Measures python-paillier, the reference `veil bench paillier` compares with.

Run with python-paillier's source on the path and gmpy2 installed, e.g.:

  git -C python-paillier archive 1.5.0 phe | tar -x -C /tmp/phe150
  apt-get install python3-gmpy2          # Debian bookworm: gmpy2 2.1.2, GMP 6.2.1
  PYTHONPATH=/tmp/phe150 /usr/bin/python3 phe_baseline.py

It times, in one process on one core, with a 2048-bit key: raw encryption
(fresh r, r^n mod n^2), raw CRT decryption and raw homomorphic addition (one
multiplication mod n^2) -- the operations `veil bench paillier` times -- and
the same through the public API on floats. It prints wall-clock and
process-CPU milliseconds per operation as JSON.
"""
import json
import platform
import random
import time

import gmpy2
import phe
from phe import paillier


def timed(fn, reps):
    w0, c0 = time.perf_counter(), time.process_time()
    for i in range(reps):
        fn(i)
    return (time.perf_counter() - w0) * 1e3 / reps, (time.process_time() - c0) * 1e3 / reps


def main():
    rng = random.Random(1)
    pk, sk = paillier.generate_paillier_keypair(n_length=2048)
    reps = 200
    plain = [rng.getrandbits(64) for _ in range(reps)]
    floats = [rng.gauss(0, 1) for _ in range(reps)]
    raw = [None] * reps
    enc = [None] * reps
    out = {}

    def raw_encrypt(i):
        raw[i] = pk.raw_encrypt(plain[i])

    def raw_decrypt(i):
        assert sk.raw_decrypt(raw[i]) == plain[i]

    acc = [None]

    def raw_add(i):
        # EncryptedNumber._raw_add: one gmpy2 multiplication modulo n^2.
        if acc[0] is None:
            acc[0] = paillier.EncryptedNumber(pk, raw[0])
        acc[0] = paillier.EncryptedNumber(pk, acc[0]._raw_add(acc[0].ciphertext(False), raw[i % reps]))

    def api_encrypt(i):
        enc[i] = pk.encrypt(floats[i])

    def api_decrypt(i):
        sk.decrypt(enc[i])

    for name, fn, n in (("raw_encrypt", raw_encrypt, reps), ("raw_decrypt", raw_decrypt, reps),
                        ("raw_add", raw_add, 100 * reps), ("encrypt_float", api_encrypt, reps),
                        ("decrypt_float", api_decrypt, reps)):
        wall, cpu = timed(fn, n)
        out[name] = {"wall_ms": round(wall, 4), "cpu_ms": round(cpu, 4), "reps": n}
    out["versions"] = {"phe": phe.__version__, "gmpy2": gmpy2.version(), "gmp": gmpy2.mp_version(),
                       "python": platform.python_version()}
    out["machine"] = platform.processor() or platform.machine()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
