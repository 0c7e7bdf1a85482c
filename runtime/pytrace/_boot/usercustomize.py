# pytrace's start of a traced job: site.py imports sitecustomize, then usercustomize, from
# the PYTHONPATH that pytrace gave the job, and the job's tracing starts at the last of the
# two (pytrace/_launch.py's boot()). This one runs the code of sitecustomize.py beside it,
# as itself: the module it shadows, if any, is run and takes its name.
from _frozen_importlib_external import SourceFileLoader as _pytrace_loader

exec(_pytrace_loader(__name__, __file__.rpartition("/")[0] + "/sitecustomize.py").get_code(__name__))
