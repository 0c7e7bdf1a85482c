"""The ITT collector in a process that never imported pytrace: a child that inherited
INTEL_LIBITTNOTIFY64 (pytrace --torch sets it) and runs torch under emit_itt() gets the
extension's file loaded by ittnotify alone, so pt_itt_init never ran. Its task stack's
thread key must still be its own: with a key never created (0) pthread_setspecific
overwrote another library's key 0 -- in CPython the interpreter's own thread-state key,
and the child crashed taking the GIL (a torch child segfaulted, exit -11). No torch
needed: the job calls the ITT entries through ctypes, as ittnotify does."""
import glob
import importlib.util
import os
import subprocess
import sys

JOB = r"""
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])          # loaded as ittnotify loads it: no module init


class ItID(ctypes.Structure):
    _fields_ = [("d1", ctypes.c_ulonglong), ("d2", ctypes.c_ulonglong), ("d3", ctypes.c_ulonglong)]


lib.__itt_domain_create.restype = ctypes.c_void_p
lib.__itt_domain_create.argtypes = [ctypes.c_char_p]
lib.__itt_string_handle_create.restype = ctypes.c_void_p
lib.__itt_string_handle_create.argtypes = [ctypes.c_char_p]
lib.__itt_task_begin.argtypes = [ctypes.c_void_p, ItID, ItID, ctypes.c_void_p]
lib.__itt_task_end.argtypes = [ctypes.c_void_p]
api = ctypes.pythonapi
api.PyGILState_GetThisThreadState.restype = ctypes.c_void_p
api.PyThreadState_Get.restype = ctypes.c_void_p
before = api.PyGILState_GetThisThreadState()
dom = lib.__itt_domain_create(b"PyTorch")
nid = ItID(0, 0, 0)
lib.__itt_task_begin(dom, nid, nid, lib.__itt_string_handle_create(b"aten::add"))
lib.__itt_task_end(dom)
after = api.PyGILState_GetThisThreadState()
print(before == api.PyThreadState_Get(), after == before, "pytrace" in sys.modules, flush=True)
"""


def extension_file():
    # pytrace's directory without importing it (an import would initialise the extension)
    spec = importlib.util.find_spec("pytrace")
    found = glob.glob(os.path.join(os.path.dirname(spec.origin), "_pytrace*.so"))
    assert len(found) == 1, found
    return found[0]


def test_itt_entries_leave_other_thread_keys_alone():
    r = subprocess.run([sys.executable, "-c", JOB, extension_file()], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, (r.returncode, r.stderr[-3000:])
    # the interpreter's thread state, read through its TSS key, is the same after the ITT calls
    assert r.stdout.split() == ["True", "True", "False"], r.stdout
