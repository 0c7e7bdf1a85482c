"""A fork while another thread interns new ITT labels (each ctypes call releases the
GIL, as a torch op does): the child must be forked, the parent must go on (test_itt_fork)."""
import ctypes, os, sys, threading, time
import pytrace
ext = pytrace._ext()
lib = ctypes.CDLL(ext.__file__)


class ItID(ctypes.Structure):
    _fields_ = [("d1", ctypes.c_ulonglong), ("d2", ctypes.c_ulonglong), ("d3", ctypes.c_ulonglong)]


lib.__itt_domain_create.restype = ctypes.c_void_p
lib.__itt_domain_create.argtypes = [ctypes.c_char_p]
lib.__itt_string_handle_create.restype = ctypes.c_void_p
lib.__itt_string_handle_create.argtypes = [ctypes.c_char_p]
lib.__itt_task_begin.argtypes = [ctypes.c_void_p, ItID, ItID, ctypes.c_void_p]
lib.__itt_task_end.argtypes = [ctypes.c_void_p]

dom = lib.__itt_domain_create(b"PyTorch")
pytrace.start(fork_children=False)
ext._itt_set(True)
stop = False
NAMES = 40000  # new names: each first use in the session interns a label


def ops():
    nid = ItID(0, 0, 0)
    i = 0
    while not stop:
        h = lib.__itt_string_handle_create(b"aten::op_%d" % (i % NAMES))
        lib.__itt_task_begin(dom, nid, nid, h)
        lib.__itt_task_end(dom)
        i += 1


th = threading.Thread(target=ops)
th.start()
deadline = time.monotonic() + float(sys.argv[1])
forks = 0
while time.monotonic() < deadline:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    forks += 1
    if forks % 20 == 0:  # a new session: every name is interned again
        pytrace.stop()
        pytrace.start(fork_children=False)
        ext._itt_set(True)
stop = True
th.join()
spans = ext._itt_stats()["spans"]
pytrace.stop()
print("forks", forks, "spans", spans, flush=True)
