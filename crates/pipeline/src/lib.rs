//! rsagg-pipeline (under construction).
