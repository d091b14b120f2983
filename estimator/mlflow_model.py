"""MLflow pyfunc wrapper of an estimator bundle, logged as "model from code" (MLflow stores this file, not a pickle).

``mlflow.pyfunc.load_model(uri).predict(frame)`` returns the frame's ``predicted_us``; ``estimator.load(uri)``
skips pyfunc and loads the bundle in the artifacts directly.
"""
from __future__ import annotations

from pathlib import Path

import mlflow
import pandas as pd
from mlflow.pyfunc import PythonModel


class KernelRuntimeModel(PythonModel):
    def load_context(self, context) -> None:
        from stepcast.estimator.registry import load

        self.estimator = load(Path(context.artifacts["bundle"]))

    def predict(self, context, model_input: pd.DataFrame, params=None) -> pd.DataFrame:
        return self.estimator.predict_frame(model_input)[["predicted_us"]]


mlflow.models.set_model(KernelRuntimeModel())
