"""Trainers run as `python3 -m flashroll.trainers.<name>`; loop.py is their
shared lease -> loss -> ack -> step -> checkpoint -> publish loop."""
