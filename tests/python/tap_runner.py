"""Runs the Python test modules given on the command line and prints TAP (for meson's
'tap' protocol, so that every test case is counted in the suite's summary)."""

import importlib
import os
import sys
import time
import traceback
import unittest


class TapResult(unittest.TestResult):
    def __init__(self):
        super().__init__()
        self.number = 0
        self.started = 0.0

    def startTest(self, test):
        super().startTest(test)
        self.started = time.monotonic()
        self.reported = False

    def stopTest(self, test):
        # A test whose subtests failed gets neither addSuccess nor addFailure.
        if not self.reported:
            self._line(False, test, " (failed subtests above)")
        super().stopTest(test)

    def _line(self, ok, test, note=""):
        self.number += 1
        self.reported = True
        took = time.monotonic() - self.started
        print(f"{'ok' if ok else 'not ok'} {self.number} - {test.id()} ({took:.1f} s){note}",
              flush=True)

    def _diagnose(self, text):
        for line in text.rstrip().splitlines():
            print("# " + line, flush=True)

    def addSuccess(self, test):
        super().addSuccess(test)
        self._line(True, test)

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._line(False, test)
        self._diagnose(self.failures[-1][1])

    def addError(self, test, err):
        super().addError(test, err)
        self._line(False, test)
        self._diagnose(self.errors[-1][1])

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._line(True, test, f" # SKIP {reason}")

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            self._diagnose(f"subtest {subtest._subDescription()}:\n" + "".join(traceback.format_exception(*err)))


def main(argv):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    loader = unittest.TestLoader()
    suite = unittest.TestSuite()
    for name in argv[1:]:
        module = importlib.import_module(os.path.splitext(os.path.basename(name))[0])
        suite.addTests(loader.loadTestsFromModule(module))
    print(f"1..{suite.countTestCases()}", flush=True)
    result = TapResult()
    suite.run(result)
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
