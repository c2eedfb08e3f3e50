"""`python -m aorta.hw_queue_eval`."""

from aorta.hw_queue_eval.cli import main

if __name__ == "__main__":
    main()
