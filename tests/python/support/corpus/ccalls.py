"""C calls: len, sorted with a key function, dict methods, map, str methods."""
import _harness


def key_fn(item):
    return item[1]


class Box:
    def __init__(self, v):
        self.v = v

    def get(self):
        return self.v


def entry():
    data = [(i, (i * 7919) % 101) for i in range(200)]
    ordered = sorted(data, key=key_fn)
    d = {}
    for k, v in ordered[:50]:
        d.setdefault(v, []).append(k)
        d.get(k)
    keys = sorted(d.keys())
    total = len(keys) + len(d) + sum(map(len, d.values()))
    words = " ".join(str(k) for k in keys).split()
    total += len(words)
    boxes = [Box(i) for i in range(20)]
    total += sum(map(Box.get, boxes))
    total += max(boxes, key=Box.get).v
    return total


if __name__ == "__main__":
    _harness.begin(["entry"])
    print(entry())
    _harness.end()
