"""A run's configuration and the environment variables that change queue behaviour.

Near the bottom of the folder order: backends, results and commands all read it.
"""
