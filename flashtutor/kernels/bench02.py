from flashtutor.bench.ch02 import *  # moved; notebooks are updated at the next re-execution
