from flashtutor.bench.launch_cost import *  # moved; notebooks are updated at the next re-execution
