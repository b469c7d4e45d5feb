"""The users' usual JPEG decoders on all cores, the peer of bench_pipeline's decode rows: PIL (Pillow) and
OpenCV (cv2.imdecode), each file read and decoded to RGB (BGR for OpenCV, as it returns it) in a pool of
worker processes, one per thread. Prints one line per decoder, images/s over the files of DIR (the best of
two passes: the first warms the page cache), or why it did not run.

    python3 bench/decode_peers.py DIR [THREADS]   (bench_pipeline --peer runs it on its files)
"""
import multiprocessing
import os
import sys
import time


def _pil(path):
    from PIL import Image

    with Image.open(path) as im:
        im.convert("RGB").load()
    return 1


def _cv2(path):
    import cv2
    import numpy as np

    cv2.setNumThreads(1)  # one process per core already
    with open(path, "rb") as f:
        buf = np.frombuffer(f.read(), dtype=np.uint8)
    return 0 if cv2.imdecode(buf, cv2.IMREAD_COLOR) is None else 1


def _rate(fn, files, threads):
    best = 0.0
    with multiprocessing.Pool(threads) as pool:
        for _ in range(2):
            t0 = time.perf_counter()
            ok = sum(pool.map(fn, files, chunksize=max(1, len(files) // (4 * threads))))
            best = max(best, ok / (time.perf_counter() - t0))
    return best, ok


def main():
    if len(sys.argv) < 2:
        print(__doc__.strip().splitlines()[-1].strip())
        return 2
    d = sys.argv[1]
    threads = int(sys.argv[2]) if len(sys.argv) > 2 else os.cpu_count() or 1
    files = sorted(os.path.join(d, n) for n in os.listdir(d) if n.lower().endswith((".jpg", ".jpeg")))
    if not files:
        print(f"peer decoders: no JPEGs in {d}")
        return 1
    for name, module, fn in (("PIL", "PIL.Image", _pil), ("OpenCV", "cv2", _cv2)):
        try:
            mod = __import__(module, fromlist=["_"])
        except ImportError:
            print(f"peer decode {name}: unavailable (no {module} module)")
            continue
        version = getattr(mod, "__version__", "") or getattr(sys.modules.get("PIL"), "__version__", "")
        rate, ok = _rate(fn, files, threads)
        print(f"peer decode {name} {version} ({threads} processes, {ok} of {len(files)} files): {rate:.0f} images/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
