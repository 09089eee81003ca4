"""The drafting library: checkpoints, training, serving and the stages built from them.

Usable without the control plane: it imports `contract` and never `app`, `workers`, Celery or SQLAlchemy
(tests/test_layering.py).
"""
