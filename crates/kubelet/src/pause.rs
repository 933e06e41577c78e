//! The sandbox (pause) image, made by capstan itself and served to the runtime on loopback.
