"""Configs of the trace commands (capture, convert, export, trace-info).

They live in their own search path because ``model=`` means a checkpoint directory to
``hobbit capture`` but a config group (conf/model/) to the simulator.
"""
