"""The check() the cli tests count their checks with."""
import sys


class Checks:
    def __init__(self):
        self.count = 0
        self.failures = []

    def __call__(self, cond, what, detail=""):
        self.count += 1
        if not cond:
            self.failures.append(what)
            print(f"FAIL: {what}\n{detail}", file=sys.stderr)

    def summary(self):
        print(f"{self.count} checks, {len(self.failures)} failed")
        return 1 if self.failures else 0


check = Checks()
