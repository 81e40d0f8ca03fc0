from flashtutor.bench.ch03 import *  # moved; notebooks are updated at the next re-execution
