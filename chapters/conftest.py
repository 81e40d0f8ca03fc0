"""pytest's hooks for grading a chapter's exercise: ``pytest chapters/NN_slug`` (see the chapter's
generated ``test_chapterNN.py`` and flashtutor/grading/pytest_grading.py). The course's own ``pytest``
(testpaths: tests) never comes here."""
from flashtutor.grading import pytest_grading

pytest_addoption = pytest_grading.pytest_addoption
pytest_generate_tests = pytest_grading.pytest_generate_tests
pytest_collection_modifyitems = pytest_grading.pytest_collection_modifyitems
pytest_terminal_summary = pytest_grading.pytest_terminal_summary
graded = pytest_grading.graded
