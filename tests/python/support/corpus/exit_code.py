"""Exits with the code given on the command line, or raises."""
import sys


def main(argv):
    if argv[1:2] == ["raise"]:
        raise ValueError("corpus failure")
    if argv[1:2] == ["message"]:
        sys.exit("exit with a message")
    print("argv", argv[1:], "path0", sys.path[0], "name", __name__)
    sys.exit(int(argv[1]) if len(argv) > 1 else 0)


if __name__ == "__main__":
    main(sys.argv)
