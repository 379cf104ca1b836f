#!/usr/bin/env python3
"""A burst of concurrent streaming completions against one tandem HTTP front.

Every client starts at once (Python threads behind one barrier, http.client), streams
one /v1/completions request and reads it to the end. Reports how many answers were
complete (ending in `data: [DONE]`, no error event), how many were a clean 429/503,
how many connections failed (reset, refused, timed out), the wall time, and — given the
router's pid — its thread count before and at most during the burst.

  bench/http_burst.py --url http://127.0.0.1:8000 --streams 1000 \\
      [--router-pid PID] [--prompt-words 16] [--max-tokens 48]

Prints one JSON object. Stdlib only.
"""

import argparse
import http.client
import json
import threading
import time
import urllib.parse


def thread_count(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Threads:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--streams", type=int, default=1000)
    ap.add_argument("--router-pid", type=int, default=0)
    ap.add_argument("--prompt-words", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--timeout", type=float, default=600)
    args = ap.parse_args()

    netloc = urllib.parse.urlparse(args.url).netloc
    host, port = netloc.rsplit(":", 1)
    body = json.dumps({"prompt": " ".join(["word"] * args.prompt_words),
                       "max_tokens": args.max_tokens, "stream": True, "ignore_eos": True})
    results, lock = [], threading.Lock()
    barrier = threading.Barrier(args.streams + 1)

    def one():
        barrier.wait()
        try:
            c = http.client.HTTPConnection(host, int(port), timeout=args.timeout)
            c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
            r = c.getresponse()
            data = r.read().decode()
            c.close()
            if r.status == 200:
                ok = data.rstrip().endswith("data: [DONE]") and '"error"' not in data
                out = "complete"
                if not ok:  # the stream's error event, or where it stopped
                    err = [json.loads(line[6:]).get("error", {}).get("message", "")
                           for line in data.splitlines()
                           if line.startswith("data: {") and '"error"' in line]
                    out = "broken: " + (err[0][:60] if err else "no [DONE]")
            elif r.status in (429, 503):
                out = f"busy {r.status}"
            else:
                out = f"http {r.status}"
        except Exception as e:  # a reset or refused connection lands here
            out = type(e).__name__
        with lock:
            results.append(out)

    threads = [threading.Thread(target=one, daemon=True) for _ in range(args.streams)]
    for t in threads:
        t.start()
    before = thread_count(args.router_pid) if args.router_pid else 0
    most = before
    barrier.wait()
    start = time.time()
    while any(t.is_alive() for t in threads):
        if args.router_pid:
            most = max(most, thread_count(args.router_pid))
        time.sleep(0.05)
    wall = time.time() - start
    counts = {}
    for r in results:
        counts[r] = counts.get(r, 0) + 1
    print(json.dumps({"streams": args.streams, "wall_s": round(wall, 2), "outcomes": counts,
                      "router_threads_before": before, "router_threads_most": most}))


if __name__ == "__main__":
    main()
