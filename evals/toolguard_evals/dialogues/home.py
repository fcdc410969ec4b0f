"""Smart home: devices per room, lights, thermostats, locks, scenes, schedules, energy."""

from __future__ import annotations

import functools
import random
from typing import Any

from toolguard_evals.dialogues.framework import (
    Backend,
    Builder,
    Domain,
    Infeasible,
    Param,
    ToolError,
    choice,
    flag,
    integer,
    number,
    text,
    tool,
)

_ROOMS = ("living room", "kitchen", "bedroom", "office", "hallway", "porch", "bathroom")
_DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
TOOLS = (
    tool("list_devices", "Devices in a room with their ids and types.", "read", "devices",
         ["room"], room=choice("Room.", *_ROOMS)),
    tool("get_device_state", "Current state of one device.", "read", "devices", ["device_id"],
         device_id=text("Device id from list_devices.", "identifier")),
    tool("set_light", "Switch a light and optionally dim it.", "write", "lights",
         ["device_id", "on"], device_id=text("Light id.", "identifier"),
         on=flag("True to switch on, False to switch off."),
         brightness=integer("Brightness in percent.", minimum=1, maximum=100)),
    tool("set_thermostat", "Set the target temperature of a thermostat.", "write", "climate",
         ["device_id", "target_celsius"], device_id=text("Thermostat id.", "identifier"),
         target_celsius=number("Target in degrees Celsius.", "number", minimum=5, maximum=30),
         mode=choice("Operating mode.", "heat", "cool", "auto", default="auto")),
    tool("set_lock", "Lock or unlock a door lock.", "write", "security", ["device_id", "locked"],
         device_id=text("Lock id.", "identifier"), locked=flag("True to lock.")),
    tool("list_scenes", "Saved scenes (groups of device settings).", "read", "scenes", []),
    tool("run_scene", "Apply a saved scene.", "write", "scenes", ["scene_id"],
         scene_id=text("Scene id from list_scenes.", "identifier")),
    tool("create_schedule", "Run an action on a device at a time on chosen weekdays.", "write",
         "schedules", ["device_id", "action", "time", "days"],
         device_id=text("Device id.", "identifier"),
         action=choice("What to do.", "turn_on", "turn_off", "lock", "unlock"),
         time=text("Time of day, HH:MM.", "time"),
         days=Param("array", "Weekdays, e.g. ['mon', 'fri'].", None,
                    items={"type": "string", "enum": list(_DAYS)})),
    tool("get_energy_report", "Electricity used by the home.", "read", "energy", ["period"],
         period=choice("Period.", "today", "this_week", "this_month")),
)


def _device_id(prefix: str, r: random.Random) -> str:
    return f"{prefix}-{r.getrandbits(24):06x}"


class HomeBackend(Backend):
    """Devices in every room, a few scenes."""

    def setup(self) -> None:
        r = self.rng
        devices: dict[str, dict[str, Any]] = {}
        for room in _ROOMS:
            kinds = ["light"] + (["thermostat"] if room in ("living room", "bedroom", "office",
                                                           "bathroom") else [])
            if room in ("hallway", "porch"):
                kinds.append("lock")
            if r.random() < 0.4:
                kinds.append("light")
            for k in kinds:
                did = self.unique(functools.partial(_device_id, k[:2], r))
                state: dict[str, Any] = {"on": r.random() < 0.3, "brightness": 80} if k == \
                    "light" else {"target_celsius": 19.5, "mode": "auto"} if k == "thermostat" \
                    else {"locked": r.random() < 0.5}
                name = {"light": "ceiling light", "thermostat": "thermostat",
                        "lock": "door lock"}[k]
                if any(d["name"] == name and d["room"] == room for d in devices.values()):
                    name = "floor lamp"
                devices[did] = {"device_id": did, "room": room, "type": k, "name": name,
                                "state": state}
        scenes = {self.unique(lambda: f"sc-{r.getrandbits(16):04x}"): n
                  for n in ("Movie night", "Good morning",
                                                            "Away", "Dinner")}
        self.s = {"devices": devices, "scenes": scenes, "schedules": [], "last_scene": None}

    def _dev(self, did: str, kind: str | None = None) -> dict[str, Any]:
        d: dict[str, Any] | None = self.s["devices"].get(did)
        if d is None:
            raise ToolError(f"no device {did}")
        if kind is not None and d["type"] != kind:
            raise ToolError(f"{did} is a {d['type']}, not a {kind}")
        return d

    def do_list_devices(self, room: str) -> dict[str, Any]:
        return {"room": room, "devices": [{k: d[k] for k in ("device_id", "type", "name")}
                                          for d in self.s["devices"].values()
                                          if d["room"] == room]}

    def do_get_device_state(self, device_id: str) -> dict[str, Any]:
        d = self._dev(device_id)
        return {"device_id": device_id, "name": d["name"], **d["state"]}

    def do_set_light(self, device_id: str, on: bool,
                     brightness: int | None = None) -> dict[str, Any]:
        d = self._dev(device_id, "light")
        d["state"]["on"] = on
        if brightness is not None:
            d["state"]["brightness"] = brightness
        return {"device_id": device_id, **d["state"]}

    def do_set_thermostat(self, device_id: str, target_celsius: float,
                          mode: str = "auto") -> dict[str, Any]:
        d = self._dev(device_id, "thermostat")
        d["state"] = {"target_celsius": target_celsius, "mode": mode}
        return {"device_id": device_id, **d["state"]}

    def do_set_lock(self, device_id: str, locked: bool) -> dict[str, Any]:
        d = self._dev(device_id, "lock")
        d["state"]["locked"] = locked
        return {"device_id": device_id, "locked": locked}

    def do_list_scenes(self) -> dict[str, Any]:
        return {"scenes": [{"scene_id": k, "name": v} for k, v in self.s["scenes"].items()]}

    def do_run_scene(self, scene_id: str) -> dict[str, Any]:
        if scene_id not in self.s["scenes"]:
            raise ToolError(f"no scene {scene_id}")
        self.s["last_scene"] = scene_id
        return {"scene": self.s["scenes"][scene_id], "applied": True}

    def do_create_schedule(self, device_id: str, action: str, time: str,
                           days: list[str]) -> dict[str, Any]:
        self._dev(device_id)
        if not days or any(d not in _DAYS for d in days):
            raise ToolError(f"days must be some of {list(_DAYS)}")
        sid = f"sch-{self.rng.randrange(1000, 9999)}"
        self.s["schedules"].append({"id": sid, "device_id": device_id, "action": action,
                                    "time": time, "days": days})
        return {"schedule_id": sid, "next_run": f"{days[0]} {time}"}

    def do_get_energy_report(self, period: str) -> dict[str, Any]:
        kwh = {"today": 9.4, "this_week": 61.2, "this_month": 248.7}[period]
        return {"period": period, "kwh": kwh, "top_device": "thermostat"}


# ============================================================================ scenarios
def _devices(b: Builder, room: str) -> list[dict[str, Any]]:
    return list(b.call("list_devices", {"room": room}, reuse=True)["devices"])


def lights(b: Builder) -> None:
    room = b.pick("living room", "kitchen", "bedroom", "office")
    pct = b.pick(30, 40, 60, 75)
    b.user(b.pick(f"Dim the {room} lights to {pct}%.", f"Set the {room} light to {pct} percent.",
                  f"Turn on the {room} light at {pct}% brightness."))
    devs = _devices(b, room)
    light = next(d for d in devs if d["type"] == "light")
    b.call("set_light", {"device_id": light["device_id"], "on": True, "brightness": pct})
    b.say(f"The {room} {light['name']} is on at {pct}%.")
    if b.chance(0.6):
        room2 = b.pick(*[r for r in ("kitchen", "bedroom", "office", "hallway") if r != room])
        b.user(b.pick(f"Do the same in the {room2}.", f"And the {room2} too."), kind="anaphora")
        devs2 = _devices(b, room2)
        l2 = next(d for d in devs2 if d["type"] == "light")
        b.call("set_light", {"device_id": l2["device_id"], "on": True, "brightness": pct},
               derived={"brightness": "same as before"})
        b.say(f"The {room2} light is at {pct}% too.")


def heating(b: Builder) -> None:
    room = b.pick("living room", "bedroom", "office", "bathroom")
    temp = b.pick(20, 21.5, 22, 19)
    b.user(b.pick(f"Set the heating in the {room} to {temp} degrees.",
                  f"Make the {room} {temp}°C please.",
                  f"Warm up the {room} to {temp}."))
    devs = _devices(b, room)
    th = next(d for d in devs if d["type"] == "thermostat")
    args: dict[str, Any] = {"device_id": th["device_id"], "target_celsius": temp,
                            "mode": "heat"}
    b.call("set_thermostat", args)
    b.say(f"The {room} thermostat now heats to {temp}°C.")
    if b.chance(0.45):
        new = temp - b.pick(1, 2)
        b.user(b.pick(f"No, make it {new}.", f"Hmm, too warm - {new} instead."),
               kind="correction")
        b.call("set_thermostat", {**args, "target_celsius": new})
        b.say(f"Changed to {new}°C.")


def door(b: Builder) -> None:
    room = b.pick("hallway", "porch")
    door_name = "front door" if room == "hallway" else "porch door"
    b.user(b.pick(f"Did I lock the {door_name}?", f"Is the {door_name} locked?"))
    devs = _devices(b, room)
    lock = next(d for d in devs if d["type"] == "lock")
    st = b.call("get_device_state", {"device_id": lock["device_id"]})
    b.say(f"The {door_name} is {'locked' if st['locked'] else 'unlocked'}.")
    b.user(b.pick("Lock it.", "Please lock it now.", "Make sure it's locked."), kind="anaphora")
    b.call("set_lock", {"device_id": lock["device_id"], "locked": True})
    b.say(f"The {door_name} is locked.")


def schedule(b: Builder) -> None:
    room = b.pick("porch", "hallway", "living room")
    hhmm = b.pick("19:30", "06:45", "22:00", "07:15")
    at, how = b.time_phrase(hhmm)
    days, said = b.pick((["mon", "tue", "wed", "thu", "fri"], "every weekday"),
                        (["sat", "sun"], "at weekends"), (list(_DAYS), "every day"))
    action = "turn_off" if hhmm == "22:00" else "turn_on"
    verb = "off" if action == "turn_off" else "on"
    b.user(b.pick(f"Switch the {room} light {verb} at {at} {said}.",
                  f"Schedule the {room} light to go {verb} {said} at {at}."))
    devs = _devices(b, room)
    light = next(d for d in devs if d["type"] == "light")
    out = b.call("create_schedule", {"device_id": light["device_id"], "action": action,
                                     "time": hhmm, "days": days},
                 derived={"time": how, "days": said})
    b.say(f"Scheduled ({out['schedule_id']}); next run {out['next_run']}.")


def vague_lights(b: Builder) -> None:
    b.user(b.pick("Turn on the lights.", "Lights on please.", "Can you switch the light on?"),
           kind="vague_request", label="ask_user", missing=["room"])
    b.ask("Which room?")
    room = b.pick("kitchen", "office", "bedroom", "bathroom")
    b.user(b.pick(f"The {room}.", f"{room}", f"In the {room}, thanks."), kind="answer")
    devs = _devices(b, room)
    light = next(d for d in devs if d["type"] == "light")
    b.call("set_light", {"device_id": light["device_id"], "on": True})
    b.say(f"The {room} {light['name']} is on.")


def scene(b: Builder) -> None:
    name = b.pick("Movie night", "Good morning", "Away", "Dinner")
    b.user(b.pick(f"Run my {name} scene.", f"Activate the '{name}' scene.",
                  f"Switch to {name} mode."))
    out = b.call("list_scenes", {}, reuse=True)
    sid = next(s["scene_id"] for s in out["scenes"] if s["name"] == name)
    b.call("run_scene", {"scene_id": sid})
    b.say(f"'{name}' is applied.")
    if b.chance(0.5):
        period, said = b.pick(("today", "today"), ("this_week", "this week"),
                              ("this_month", "this month"))
        b.user(b.pick(f"How much power did we use {said}?",
                      f"What's the energy usage {said}?"))
        rep = b.call("get_energy_report", {"period": period})
        b.say(f"{rep['kwh']} kWh {said}; the {rep['top_device']} used the most.")


DOMAIN = Domain(
    name="home",
    service="Hearthlink smart home",
    tools=TOOLS,
    backend=HomeBackend,
    scenarios={"lights": lights, "heating": heating, "door": door, "schedule": schedule,
               "vague_lights": vague_lights, "scene": scene},
    infeasible=(
        Infeasible(("Start the washing machine.", "Run the dishwasher on eco mode."),
                   "Your appliances aren't connected to Hearthlink, so I can't control them."),
        Infeasible(("Show me the camera feed from the garden.",
                    "Who rang the doorbell an hour ago?"),
                   "There are no cameras or doorbells in your setup."),
        Infeasible(("Open the garage door.", "Water the garden for ten minutes."),
                   "I have no garage or irrigation devices to control."),
        Infeasible(("Order more light bulbs.", "Buy a second thermostat for the kitchen."),
                   "I can't make purchases."),
    ),
)

__all__ = ["DOMAIN", "TOOLS", "HomeBackend"]
