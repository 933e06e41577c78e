//! Pod volumes: directories on the host, bind-mounted into containers by the runtime.
