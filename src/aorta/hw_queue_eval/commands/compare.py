"""placeholder"""

import click


def register(group: click.Group) -> None:
    return None
