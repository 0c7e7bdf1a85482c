# pytrace's start of a traced job (pytrace run, record, top, web): python imports this
# from the PYTHONPATH that pytrace gave the job, before it runs the program. It runs
# pytrace/_launch.py's boot() without importing the pytrace package, which starts tracing
# and puts PYTHONPATH back; the module this one shadows, if any, is run and takes its name.
# usercustomize.py runs this same code as itself.
def _pytrace_boot(hook=__file__):
    from _frozen_importlib_external import SourceFileLoader
    launcher = hook.rpartition("/_boot/")[0] + "/_launch.py"
    code = SourceFileLoader("pytrace._launch", launcher).get_code("pytrace._launch")
    namespace = {"__name__": "pytrace._launch", "__file__": launcher}
    exec(code, namespace)
    return namespace["boot"](hook)


_pytrace_real = _pytrace_boot()
if _pytrace_real is None:
    # none of that name: site.py takes this as its absence, as without pytrace
    raise ImportError("no %s beside pytrace's" % __name__, name=__name__)
__import__("sys").modules[__name__] = _pytrace_real
